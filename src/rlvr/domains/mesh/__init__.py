"""The `mesh` domain: a trimesh script run in the sandbox; the exported mesh is checked geometrically."""
from rlvr.domains.mesh.source import MeshConfig, MeshSource
from rlvr.domains.mesh.verifier import MeshVerifier
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain(
    "mesh", MeshSource, MeshConfig, verifiers={"mesh": VerifierKind(MeshVerifier)},
    description="3D modelling: a trimesh script run in the sandbox; the exported mesh is checked for "
                "watertightness, winding, bodies, volume, bounding box and holes, with credit per check.")
