"""The `blender` domain: a bpy script run in Blender in the sandbox (`interpreter.py` finds `.venv-blender`;
`harness/scene.py` runs inside it) builds a scene, checked for geometry, references and rendered frames
(`checks.py`); its multi-turn tasks get `run_scene` and `render_preview` (`tools.py`)."""
from rlvr.domains.blender.settings import BlenderSettings
from rlvr.domains.blender.source import BlenderConfig, BlenderSource
from rlvr.domains.blender.tools import TOOLS
from rlvr.domains.blender.verifier import BlenderVerifier
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain(
    "blender", BlenderSource, BlenderConfig,
    verifiers={"blender": VerifierKind(BlenderVerifier, BlenderSettings)},
    tools=TOOLS,
    description="3D scenes in Blender: a bpy script run in the sandbox builds, textures and lights a scene; "
                "the saved scene is checked for geometry, resource references and rendered frames "
                "(Blender: `make blender`).")
