"""Base images without a registry: Debian built from Debian's own packages (mmdebstrap) and tagged in podman's
local store under the name a Dockerfile uses, so `FROM debian:bookworm-slim` builds offline exactly as it
would anywhere (`rlvr images base`, which `make images` runs).

The root is minbase with merged /usr, without documentation, man pages or locales (as Debian's own slim images
are), with an /etc/hosts that names localhost and an empty resolv.conf (mmdebstrap copies the host's), and
`CMD ["bash"]` like the official image. Built once: a tag already in the store is left alone unless forced.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from rlvr.sandbox import podman
from rlvr.sandbox.images import normalise
from rlvr.sandbox.podman import ImageError

SLIM_EXCLUDES = ("/usr/share/man/*", "/usr/share/doc/*", "/usr/share/info/*", "/usr/share/locale/*",
                 "/usr/share/groff/*", "/usr/share/lintian/*", "/usr/share/linda/*")
"""Paths dpkg never installs in a slim image (its own dpkg.cfg.d keeps them out of later installs too)."""
SLIM_KEEPS = ("/usr/share/doc/*/copyright", "/usr/share/locale/locale.alias")
HOOKS = ('printf "127.0.0.1\\tlocalhost\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n" > "$1/etc/hosts"',
         ': > "$1/etc/resolv.conf"', 'echo localhost > "$1/etc/hostname"')
"""mmdebstrap customize hooks: the files it takes from the host or leaves out."""


def mmdebstrap_argv(suite: str, out: Path, mirror: str | None = None) -> list[str]:
    """The mmdebstrap command line of a slim `suite` root written as a tarball to `out`."""
    found = shutil.which("mmdebstrap")
    if found is None:
        raise ImageError("mmdebstrap is not installed", field="images base",
                         fix="apt-get install -y mmdebstrap (or `make images`)")
    argv = [found, "--variant=minbase", "--mode=root", "--format=tar", "--quiet",
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr"]
    argv += [f"--dpkgopt=path-exclude={p}" for p in SLIM_EXCLUDES]
    argv += [f"--dpkgopt=path-include={p}" for p in SLIM_KEEPS]
    argv += [f"--customize-hook={h}" for h in HOOKS]
    return argv + [suite, str(out)] + ([mirror] if mirror else [])


def build_base(suite: str = "bookworm", tag: str = "debian:bookworm-slim", *, force: bool = False,
               mirror: str | None = None) -> tuple[str, bool]:
    """Build the base image and tag it (`debian:bookworm-slim` -> docker.io/library/debian:bookworm-slim);
    (image ID, whether it was built now). An image already under that tag is kept unless `force`."""
    name = normalise(tag)
    found = podman.inspect(name)
    if found is not None and not force:
        return found.id, False
    with tempfile.TemporaryDirectory(prefix="rlvr-base-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        res = subprocess.run(mmdebstrap_argv(suite, tar, mirror), capture_output=True, text=True, check=False)
        if res.returncode != 0 or not tar.is_file():
            why = " ".join((res.stderr.strip().splitlines() or ["no output"])[-1].split())[:300]
            raise ImageError(f"mmdebstrap could not build Debian {suite}: {why}", field="images base",
                             fix="check that Debian's archive (deb.debian.org) is reachable, "
                                 "or pass --mirror URL")
        out = podman.run(["import", "--change", 'CMD ["bash"]', "--message", f"mmdebstrap {suite} (rlvr)",
                          str(tar), name], timeout_s=600.0)
    image_id = out.stdout.strip().splitlines()[-1].removeprefix("sha256:")
    return image_id, True

