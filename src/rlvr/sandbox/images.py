"""Image references: what a task names as its environment, parsed in the style of containers-transports(5).

    dockerfile:CONTEXT_DIR                 a Dockerfile (or Containerfile) at the top of its build context
    dockerfile:CONTEXT_DIR#path/Dockerfile  another Dockerfile, relative to the context
    docker-archive:PATH                    a `docker save` / `podman save` tarball
    oci:PATH                               an OCI image layout directory
    oci-archive:PATH                       a tarball of an OCI image layout
    containers-storage:REF                 an image already in the local podman store (never pulled)
    docker://REF or a bare REF             a registry reference: the local store first, else a pull

`None` is the host root, the default environment of every task. Parsing is pure (no file or tool is touched);
`rlvr.sandbox.imagecache.resolve` builds or pulls what a reference names and unpacks it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rlvr.errors import UserError

TRANSPORTS = ("dockerfile", "docker-archive", "oci", "oci-archive", "containers-storage", "docker")
"""The transports a reference may name; `docker` (a registry) is the one a bare reference means."""
PATH_TRANSPORTS = ("dockerfile", "docker-archive", "oci", "oci-archive")
"""Transports whose target is a path on this machine (relative ones are resolved against a base directory)."""
REFERENCE_FIX = ("write dockerfile:DIR, docker-archive:FILE.tar, oci:DIR, oci-archive:FILE.tar, "
                 "containers-storage:NAME or a registry reference such as debian:bookworm-slim")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = re.compile(rf"^{_COMPONENT}(?::[0-9]+)?(?:/{_COMPONENT})*"  # [host[:port]/]path
                   r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")  # [:tag][@digest]
"""A registry reference (distribution's grammar, lower-case names): [host[:port]/]path[:tag][@digest]."""


@dataclass(frozen=True)
class ImageRef:
    """One parsed image reference."""

    transport: str
    """One of TRANSPORTS."""
    target: str
    """The path (absolute once `absolute()` has been applied) or the registry reference."""
    dockerfile: str | None = None
    """`dockerfile:` only: the Dockerfile's path relative to the context (None: Dockerfile or
    Containerfile)."""

    @property
    def local(self) -> bool:
        """Whether the image comes from a path on this machine rather than an image store or registry."""
        return self.transport in PATH_TRANSPORTS

    def absolute(self, base: str | Path | None = None) -> ImageRef:
        """The same reference with a relative path made absolute against `base` (default: the working dir)."""
        if not self.local:
            return self
        path = Path(self.target).expanduser()
        if not path.is_absolute():
            path = Path(base or Path.cwd()) / path
        return ImageRef(self.transport, str(path.resolve()), self.dockerfile)

    def __str__(self) -> str:
        if self.transport == "docker":
            return self.target
        return f"{self.transport}:{self.target}" + (f"#{self.dockerfile}" if self.dockerfile else "")


def parse(ref: str) -> ImageRef:
    """Parse a reference string; a malformed one is a UserError naming it and the accepted forms."""
    text = ref.strip() if isinstance(ref, str) else ""
    if not text:
        raise UserError("empty image reference", field="image", fix=REFERENCE_FIX)
    if text.startswith("docker://"):
        return _registry(text[len("docker://"):], ref)
    transport, sep, rest = text.partition(":")
    if sep and transport in TRANSPORTS and transport != "docker":
        if not rest:
            raise UserError(f"image reference {ref!r} names no {transport} target", field="image",
                            fix=REFERENCE_FIX)
        if transport == "containers-storage":
            return ImageRef(transport, _registry(rest, ref).target)
        if transport == "dockerfile":
            context, _, dockerfile = rest.partition("#")
            return ImageRef(transport, context, _dockerfile(dockerfile, ref) if dockerfile else None)
        return ImageRef(transport, rest)
    return _registry(text, ref)


def _dockerfile(rel: str, ref: str) -> str:
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts:
        raise UserError(f"image reference {ref!r}: the Dockerfile must lie inside its build context",
                        field="image", fix="write dockerfile:CONTEXT_DIR#path/inside/the/context/Dockerfile")
    return rel


def _registry(name: str, ref: str) -> ImageRef:
    if not _NAME.match(name):
        raise UserError(f"image reference {ref!r} is neither a transport nor a registry reference",
                        field="image", fix=REFERENCE_FIX)
    return ImageRef("docker", name)


def normalise(name: str) -> str:
    """A registry reference as podman and Docker read it: no host means docker.io, a one-part path there
    means library/, and no tag means :latest (`debian` -> docker.io/library/debian:latest)."""
    first, slash, rest = name.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        host, path = "docker.io", name
    else:
        host, path = first, rest
    if host == "docker.io" and "/" not in path:
        path = "library/" + path
    last = path.rsplit("/", 1)[-1]
    if "@" not in last and ":" not in last:
        path += ":latest"
    return f"{host}/{path}"
