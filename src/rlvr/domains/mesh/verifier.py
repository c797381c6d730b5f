"""Kind `mesh`: run the candidate's trimesh script in the sandbox, load the exported mesh here, check
geometry.

The script runs with the task's limits in a fresh workspace that holds nothing but the script. A second
command in the same workspace, run by a fixed interpreter in isolated mode (`python -I`, so files the script
left behind cannot shadow the standard library), prints the exported file as base64; the bytes are loaded
with trimesh outside the candidate's process, in a forked child of the verifier with memory and time limits
(`rlvr.verify.guard.guarded`), after size and face-count guards.

Gates (failing one scores 0): an answer with a script, a clean run, an exported file of sane size that
loads, a watertight mesh with consistent winding, and the requested number of separate bodies. Credited
checks: volume within tolerance, each bounding-box extent within tolerance, and the number of through-holes
(genus from the Euler characteristic). A PNG preview is written when `ctx.extras["preview_dir"]` is set and
matplotlib can render off-screen; otherwise the preview is skipped. Without `ctx.pool`, the process-wide
default pool of `rlvr.domains.code.verifier` is used.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
from pathlib import Path
from typing import Any

from rlvr.sandbox.limits import defaults_of, for_task, resolve
from rlvr.sandbox.result import ExecLimits, ExecStatus
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, default_pool
from rlvr.verify.extract import extract_script
from rlvr.verify.guard import guarded
from rlvr.verify.verdict import Check, Verdict

MAX_MESH_BYTES = 16 * 1024 * 1024
"""Exported files above this size are refused unread."""
MAX_FACES = 400_000
"""Meshes with more faces are refused before any geometry is computed."""
EXPORTS = ("out.stl", "out.ply", "out.obj", "out.off")
SCRIPT = "solution.py"
_DUMP = f"""
import base64, os, sys
for name in {EXPORTS!r}:
    if os.path.isfile(name) and not os.path.islink(name):
        size = os.path.getsize(name)
        if size > {MAX_MESH_BYTES}:
            print("TOO_BIG", name, size)
        else:
            with open(name, "rb") as f:
                sys.stdout.write("MESH " + name + "\\n" + base64.b64encode(f.read()).decode())
        break
else:
    print("MISSING")
"""


def _gate(name: str, ok: bool, detail: str) -> Check:
    return Check(name=f"gate:{name}", score=float(ok), weight=0.0, passed=ok, detail=detail[:300])


def load_mesh(data: bytes, name: str) -> Any:
    """Load mesh bytes with trimesh (raises ValueError for anything that is not one usable mesh)."""
    import trimesh

    if len(data) > MAX_MESH_BYTES:
        raise ValueError(f"{len(data)} bytes is over the {MAX_MESH_BYTES} byte limit")
    try:
        mesh = trimesh.load(io.BytesIO(data), file_type=Path(name).suffix.lstrip("."), force="mesh")
    # a malformed file is the candidate's fault, whatever trimesh raises
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"trimesh cannot load it: {type(exc).__name__}: {exc!s:.200}") from None
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise ValueError("no triangles")
    if len(mesh.faces) > MAX_FACES:
        raise ValueError(f"{len(mesh.faces)} faces is over the {MAX_FACES} face limit")
    return mesh


def geometry_checks(mesh: Any, spec: dict[str, Any]) -> tuple[list[Check], list[Check]]:
    """(gates, credited checks) of a loaded mesh against a spec."""
    bodies = len(mesh.split(only_watertight=False))
    watertight, winding = bool(mesh.is_watertight), bool(mesh.is_winding_consistent)
    gates = [_gate("watertight", watertight, "closed surface" if watertight else "open edges"),
             _gate("winding", winding, "consistent" if winding else "inconsistent face winding"),
             _gate("bodies", bodies == spec["bodies"], f"{bodies} bodies, want {spec['bodies']}")]
    volume = abs(float(mesh.volume)) if watertight else 0.0
    rel = abs(volume - spec["volume"]) / spec["volume"]
    checks = [Check(name="volume", score=float(rel <= spec["volume_rel_tol"]),
                    passed=rel <= spec["volume_rel_tol"],
                    detail=f"{volume:.1f} mm3, want {spec['volume']:.1f} (±{spec['volume_rel_tol']:.0%})")]
    for axis, got, want in zip("xyz", mesh.extents, spec["extents"]):
        ok = abs(float(got) - want) <= spec["extent_abs_tol"]
        checks.append(Check(name=f"extent:{axis}", score=float(ok), passed=ok,
                            detail=f"{got:.2f} mm, want {want:g}"))
    genus = (2 * bodies - int(mesh.euler_number)) // 2 if watertight else -1
    checks.append(Check(name="holes", score=float(genus == spec["holes"]), passed=genus == spec["holes"],
                        detail=f"{genus} through-holes, want {spec['holes']}"))
    return gates, checks


def render_preview(mesh: Any, path: Path) -> bool:
    """Render a shaded view of `mesh` to a PNG with matplotlib (off-screen); False when it cannot."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        from mpl_toolkits.mplot3d.art3d import Poly3DCollection
    except Exception:  # noqa: BLE001  (no matplotlib or no usable backend: skip the preview)
        return False
    faces = mesh.triangles[:: max(1, len(mesh.faces) // 6000)]
    fig = plt.figure(figsize=(3, 3), dpi=100)
    try:
        ax = fig.add_subplot(projection="3d")
        ax.add_collection3d(Poly3DCollection(faces, facecolor="#8fb3d9", edgecolor="#2b4a6f", linewidths=0.1))
        lo, hi = mesh.bounds
        span = float(max(hi - lo)) / 2 or 1.0
        for setter, c in zip((ax.set_xlim, ax.set_ylim, ax.set_zlim), (lo + hi) / 2):
            setter(float(c) - span, float(c) + span)
        ax.set_axis_off()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        return True
    except Exception:  # noqa: BLE001
        return False
    finally:
        plt.close(fig)


class MeshVerifier:
    """Sandboxed script, out-of-process geometry checks, credit per check past the gates."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        try:
            spec = json.loads(task.hidden["spec.json"])
        except (KeyError, json.JSONDecodeError) as exc:
            return Verdict.infra(f"mesh task {task.key} has no valid hidden/spec.json: {exc!s:.200}")
        script, why = extract_script(final.answer)
        if script is None:
            return Verdict(score=0.0, checks=[_gate("script", False, why)])
        pool = self.ctx.pool or default_pool()
        limits = for_task(pool, task, file_size_mb=MAX_MESH_BYTES // 2**20 + 1)
        # the trusted dump's own needs (a base64 mesh on stdout), over the pool's [sandbox] defaults
        dump_limits = resolve(defaults_of(pool), task=ExecLimits(timeout_s=30.0, memory_mb=256,
                                                                 output_bytes=MAX_MESH_BYTES * 4 // 3 + 4096))
        with pool.lease({SCRIPT: script}) as sandbox:
            run = sandbox.run(["python", SCRIPT], limits=limits)
            dump = sandbox.run(["python", "-I", "-c", _DUMP], limits=dump_limits) if run.ok else None
        if run.status is ExecStatus.infra_error or (dump is not None
                                                    and dump.status is ExecStatus.infra_error):
            failed = dump if run.ok else run
            return Verdict.infra(f"sandbox failure: {failed.error}")  # type: ignore[union-attr]
        checks = [_gate("script", True, f"{len(script)} characters"),
                  _gate("runs", run.ok,
                        f"{run.status.value}: {run.stderr[-300:]}" if not run.ok else "exit 0")]
        if dump is None:
            return Verdict(score=0.0, checks=checks, details={"stderr": run.stderr[-2000:]})
        preview_dir = self.ctx.extras.get("preview_dir")
        preview = None
        if preview_dir:
            name = hashlib.sha256(script.encode()).hexdigest()[:12]
            preview = Path(str(preview_dir)) / f"{task.domain}-{task.id}-{name}.png"
        # the file is the candidate's: parse and measure it in a child process with memory and time limits
        done, judged = guarded(_judge, dump.stdout, spec, preview, warm=("trimesh", "matplotlib.pyplot"))
        if not done:
            return Verdict(score=0.0,
                           checks=checks + [_gate("exported", False, f"loading it failed: {judged}")])
        exported, gates, credited, details = judged  # type: ignore[misc]
        checks.append(exported)
        if not exported.passed:
            return Verdict(score=0.0, checks=checks)
        checks += gates
        if not all(g.passed for g in gates):
            return Verdict(score=0.0, passed=False, checks=checks + credited, details=details)
        return Verdict.from_checks(checks + credited, details=details)



def _judge(stdout: str, spec: dict[str, Any], preview: Path | None) -> tuple[Check, list[Check], list[Check],
                                                                            dict[str, Any]]:
    """(export gate, geometry gates, credited checks, details) from the dump command's output."""
    mesh, detail = _decode(stdout)
    if mesh is None:
        return _gate("exported", False, detail), [], [], {}
    gates, credited = geometry_checks(mesh, spec)
    details: dict[str, Any] = {"faces": len(mesh.faces), "volume": float(abs(mesh.volume)),
                               "extents": [float(e) for e in mesh.extents]}
    if preview is not None and render_preview(mesh, preview):
        details["preview"] = str(preview)
    return _gate("exported", True, detail), gates, credited, details


def _decode(stdout: str) -> tuple[Any, str]:
    head, _, body = stdout.partition("\n")
    if head.startswith("MISSING"):
        return None, f"no {' / '.join(EXPORTS)} written"
    if head.startswith("TOO_BIG"):
        return None, f"exported file too big: {head[8:]}"
    if not head.startswith("MESH "):
        return None, "could not read the exported file back"
    name = head[5:].strip()
    try:
        data = base64.b64decode(body.strip(), validate=True)
        return load_mesh(data, name), f"{name}, {len(data)} bytes"
    except (binascii.Error, ValueError) as exc:
        return None, f"{name}: {exc}"
