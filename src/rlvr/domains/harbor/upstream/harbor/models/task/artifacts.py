"""Normalization and validation helpers for artifact entries.

Artifact entries are declared at the task level (``artifacts = [...]`` in
task.toml), the step level (``[[steps]].artifacts``), and the trial level
(job config). One *collection set* is the merged list of entries that a
single collection pass operates on. These helpers validate a collection set
and define the canonical mapping from entries to host paths.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path, PurePosixPath, PureWindowsPath

from rlvr.domains.harbor.upstream.harbor.constants import MAIN_SERVICE_NAME
from rlvr.domains.harbor.upstream.harbor.models.task.config import ArtifactConfig, TaskOS

# The manifest records what was collected; destination-set entries may not
# shadow it. All services share one flat ``artifacts/`` base dir.
ARTIFACT_MANIFEST_FILENAME = "manifest.json"

_WINDOWS_DRIVE_PATTERN = re.compile(r"^[A-Za-z]:[/\\]")


def effective_artifact_service(artifact: ArtifactConfig) -> str:
    """The compose service an artifact entry targets (defaults to main)."""
    return artifact.service or MAIN_SERVICE_NAME


def is_absolute_container_path(path: str) -> bool:
    """True for POSIX-absolute or Windows drive-prefixed paths."""
    return path.startswith("/") or _WINDOWS_DRIVE_PATTERN.match(path) is not None


def convention_source_for_os(os: TaskOS) -> str:
    """The conventional agent publish directory for a target OS."""
    # Local import to avoid a circular dependency with models.trial.paths.
    from rlvr.domains.harbor.upstream.harbor.models.trial.paths import EnvironmentPaths

    return EnvironmentPaths.for_os(os).artifacts_dir.as_posix()


def normalize_artifact_entries(
    entries: Sequence[str | ArtifactConfig],
) -> list[ArtifactConfig]:
    """Convert string-form entries to ``ArtifactConfig``."""
    return [
        ArtifactConfig(source=entry) if isinstance(entry, str) else entry
        for entry in entries
    ]


def is_convention_entry(artifact: ArtifactConfig, convention_source: str) -> bool:
    """True iff *artifact* is the main service's conventional publish dir."""
    return (
        artifact.source.rstrip("/") == convention_source.rstrip("/")
        and effective_artifact_service(artifact) == MAIN_SERVICE_NAME
    )


def with_convention_entry(
    entries: Sequence[str | ArtifactConfig],
    *,
    convention_source: str,
) -> list[ArtifactConfig]:
    """Normalize entries and prepend the implicit main convention entry.

    The convention entry is only injected when no entry already declares the
    convention dir for the main service; an explicit entry (e.g. with
    ``exclude`` patterns) replaces the implicit one.
    """
    normalized = normalize_artifact_entries(entries)
    if not any(
        is_convention_entry(artifact, convention_source) for artifact in normalized
    ):
        normalized.insert(0, ArtifactConfig(source=convention_source))
    return normalized


def sidecar_services(entries: Sequence[str | ArtifactConfig]) -> set[str]:
    """Names of non-main services referenced by artifact entries."""
    return {
        effective_artifact_service(artifact)
        for artifact in normalize_artifact_entries(entries)
        if effective_artifact_service(artifact) != MAIN_SERVICE_NAME
    }


def source_relative_path(source: str) -> PurePosixPath:
    """Map a container source path to its host path under the artifacts dir.

    Strips the root anchor so absolute container paths nest directly under
    the flat ``artifacts/`` base dir shared by every service (e.g.
    ``/var/log/x`` -> ``var/log/x``, ``C:/logs/x`` -> ``C:/logs/x``). ``..``
    components are dropped as defense in depth -- ``ArtifactConfig`` rejects
    them at validation time -- so no source string can resolve outside the
    artifacts directory.
    """
    parts = [
        part for part in PurePosixPath(source).parts if part not in ("", "/", "..")
    ]
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


def source_host_path(artifacts_dir: Path, source: str) -> Path:
    """Join a container source beneath a host artifacts directory."""
    relative = source_relative_path(source)
    if not isinstance(artifacts_dir, PureWindowsPath):
        return artifacts_dir.joinpath(*relative.parts)

    if _WINDOWS_DRIVE_PATTERN.match(source) is None:
        return artifacts_dir.joinpath(*relative.parts)

    parts = [
        part
        for part in PurePosixPath(source.replace("\\", "/")).parts
        if part not in ("", "/", "..")
    ]
    parts[0] = parts[0][:-1].upper()
    return artifacts_dir.joinpath(*parts)


def _paths_overlap(a: str, b: str) -> bool:
    """True when two container paths are equal or one contains the other."""
    path_a = PurePosixPath(a.rstrip("/") or "/")
    path_b = PurePosixPath(b.rstrip("/") or "/")
    return path_a == path_b or path_a in path_b.parents or path_b in path_a.parents


def artifact_is_covered_by(prior: ArtifactConfig, artifact: ArtifactConfig) -> bool:
    """Whether a prior entry covers this source at the same relative output path."""
    if effective_artifact_service(prior) != effective_artifact_service(artifact):
        return False
    prior_source = PurePosixPath(prior.source)
    source = PurePosixPath(artifact.source)
    if not source.is_relative_to(prior_source):
        return False
    prior_output = source_relative_path(prior.destination or prior.source)
    output = source_relative_path(artifact.destination or artifact.source)
    if source == prior_source and output == prior_output:
        return prior.exclude == artifact.exclude
    return not prior.exclude and output == prior_output / source.relative_to(
        prior_source
    )


@dataclass(frozen=True)
class ArtifactCollision:
    first: ArtifactConfig
    second: ArtifactConfig

    def describe(self) -> str:
        first, second = self.first, self.second
        first_output = source_relative_path(first.destination or first.source)
        second_output = source_relative_path(second.destination or second.source)
        return (
            f"Artifact destinations overlap: {first.source!r} "
            f"(service {effective_artifact_service(first)!r}) maps to {str(first_output)!r}; "
            f"{second.source!r} (service {effective_artifact_service(second)!r}) "
            f"maps to {str(second_output)!r}. Keeping the first claim and skipping "
            "conflicting entries at collection time."
        )


def validate_artifact_entries(
    entries: Sequence[str | ArtifactConfig],
    *,
    convention_source: str,
) -> list[ArtifactCollision]:
    """Validate one collection set of artifact entries.

    Raises ``ValueError`` only on a structurally invalid entry:

    - a sidecar entry whose source is not an absolute path

    Return collisions unless the earlier entry covers the later source and
    output in the same service. Callers decide how to report these findings.
    Collection keeps the first claim and skips conflicting later entries.
    """
    full = with_convention_entry(entries, convention_source=convention_source)

    for artifact in full:
        if effective_artifact_service(
            artifact
        ) != MAIN_SERVICE_NAME and not is_absolute_container_path(artifact.source):
            raise ValueError(
                f"Artifact source {artifact.source!r} from service "
                f"{artifact.service!r} must be an absolute path."
            )

    collisions = []

    for first, second in combinations(full, 2):
        if artifact_is_covered_by(first, second):
            continue
        first_output = source_relative_path(first.destination or first.source)
        second_output = source_relative_path(second.destination or second.source)
        if not _paths_overlap(str(first_output), str(second_output)):
            continue
        collisions.append(ArtifactCollision(first, second))
    return collisions
