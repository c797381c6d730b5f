"""The `[verifier]` table of a blender task, its own module so that the checks and the verifier both read
it."""
from __future__ import annotations

from rlvr.tasks.domain import VerifierSettings


class BlenderSettings(VerifierSettings):
    """The `[verifier]` table of a blender task: render size and the tolerances of the comparisons."""

    width: int = 64
    """Width of the fixed cameras' frames, pixels."""
    height: int = 64
    """Height of the fixed cameras' frames, pixels."""
    samples: int = 8
    """Cycles samples of the lit frames (the id frames take one)."""
    size_tol: float = 0.02
    """Absolute tolerance of sizes and positions, metres (plus 2 % of the reference size)."""
    angle_tol_deg: float = 2.0
    """Tolerance of rotations and of the camera's aim, degrees."""
    volume_tol: float = 0.10
    """Relative tolerance of each mesh's volume (a gate: the wrong shape in the right box scores 0)."""
    iou_min: float = 0.9
    """Silhouette IoU per object and camera that passes."""
    colour_tol: float = 0.08
    """Largest difference of mean colour (0-1, per channel) inside an object's mask that passes."""
    inspect_timeout_s: float = 60.0
    """Seconds the inspection (open, measure, render) may take."""
    inspect_memory_mb: int = 2048
    """Memory of the inspection, MiB."""
