"""A pool's environments: one warm sub-pool per image root and network setting its leases ask for.

    with pool.lease(files, image="dockerfile:tasks/t1/environment", network=False) as sb: ...

The host root without network is the pool itself. Any other environment gets a pool of the same kind and
limits whose workers run in it, started on first need (the image built or pulled and unpacked first, once per
machine: `rlvr.sandbox.imagecache`) and kept warm for the leases that follow. At most `image_pools` of them
stay warm; beyond that the least recently used one with no open lease is closed (it starts again when asked
for).

Network access is refused unless the pool allows it (`[sandbox] allow_network`), so a task that asks for the
network runs only where the run's config lets it.
"""
from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from rlvr.errors import SandboxUnavailable, UserError
from rlvr.sandbox import imagecache
from rlvr.sandbox.base import network_refused
from rlvr.sandbox.image_container import supervisor_for
from rlvr.sandbox.imagecache import ImageRoot

log = logging.getLogger(__name__)
EnvKey = tuple[str | None, bool]
"""(image ID or None, network): what tells two environments apart."""


@dataclass(frozen=True)
class Environment:
    """What the workers of one pool run in."""

    root: ImageRoot | None = None
    """The unpacked image (None: the host root)."""
    network: bool = False
    """Whether jobs reach the network (`rlvr.sandbox.network`)."""
    supervisor: str = "image"
    """Which Python the zygote runs on in an image (`rlvr.sandbox.image_container`)."""
    probe: bool = False
    """`python` jobs in an image without one run on the supervisor's interpreter (the self-test only)."""


class EnvironmentPools(ABC):
    """Mixin of an isolated pool: `environment_pool(image, network)` hands back the pool whose workers run
    there. A subclass sets the attributes below, implements `_start_environment` and calls
    `_close_environments()` from its `close()`."""

    allow_network: bool
    image_pools: int
    image_cache: str | None
    trust_image_python: bool
    probe: bool
    environment: Environment
    derived: bool
    """A pool made for a task's requirements (a venv of the host's interpreter): it has no image pools."""

    @abstractmethod
    def _start_environment(self, env: Environment) -> Any:
        """A started pool of the same kind and limits whose workers run in `env`."""

    def _env_state(self) -> tuple[threading.Lock, OrderedDict[EnvKey, Any], dict[str, ImageRoot]]:
        lock = self.__dict__.setdefault("_env_lock", threading.Lock())
        with lock:
            pools = self.__dict__.setdefault("_env_pools", OrderedDict())
            roots = self.__dict__.setdefault("_env_roots", {})
        return lock, pools, roots

    def check_network(self, network: bool) -> None:
        if network and not self.allow_network:
            raise network_refused()

    def resolve_image(self, image: str) -> ImageRoot:
        """The unpacked image a reference names, resolved once per pool (a build or pull happens at most once
        per machine: the cache's locks)."""
        lock, _, roots = self._env_state()
        with lock:
            found = roots.get(image)
        if found is None:
            found = imagecache.resolve(image, imagecache.Cache(imagecache.cache_dir(self.image_cache)))
            with lock:
                found = roots.setdefault(image, found)
        return found

    def environment_pool(self, image: str | None, network: bool = False, hold: bool = False) -> Any:
        """The pool whose workers run in `image` (a reference, None: the host root) with or without network;
        started and kept warm on first need. `hold`: count a lease on it (give it back with `release`), so
        that it is not closed to make room before the lease opens. Raises UserError for network the config
        does not allow, an image that cannot be had (one line, with the fix), or an image asked of a
        requirements pool."""
        self.check_network(network)
        if image is not None and self.derived:
            raise UserError("a task with an image gets its packages from the image, not from requirements",
                            field="requirements",
                            fix="install them in the image (a RUN step of its Dockerfile)")
        if image is None and not network:
            return self
        root = self.resolve_image(image) if image is not None else None
        key = (root.id if root else None, network)
        lock, pools, _ = self._env_state()
        with lock:
            starting = self.__dict__.setdefault("_env_starting", {})
            gate = starting.setdefault(key, threading.Lock())
        with gate:  # one start per environment; others wait for it, then find it
            with lock:
                pool = pools.get(key)
                if pool is not None:
                    pools.move_to_end(key)
                    pool.open_leases += hold
                    return pool
            pool = self._start_with_fallback(root, network)
            with lock:
                pools[key] = pool
                pool.open_leases += hold
                idle = [k for k, p in pools.items() if k != key and not p.open_leases]
                evict = [pools.pop(k) for k in idle[: max(0, len(pools) - self.image_pools)]]
        for old in evict:
            old.close()
        return pool

    def release(self, pool: Any) -> None:
        """A lease held with `environment_pool(..., hold=True)` has closed."""
        lock, _, _ = self._env_state()
        with lock:
            pool.open_leases -= 1

    def _start_with_fallback(self, root: ImageRoot | None, network: bool) -> Any:
        if root is None:
            return self._start_environment(Environment(None, network))
        supervisor = supervisor_for(root, self.trust_image_python)
        try:
            return self._start_environment(Environment(root, network, supervisor, self.probe))
        except SandboxUnavailable as exc:
            if supervisor != "image":
                raise
            # The image's Python looked usable but the zygote could not start on it: the host's serves
            # instead.
            log.warning("image %s: the zygote does not start on its Python %s (%s); jobs are exec'd instead",
                        root.id[:12], root.python, exc)
            return self._start_environment(Environment(root, network, "host", self.probe))

    def environment_pools(self) -> list[Any]:
        """The environment pools started so far (for tests and benchmarks)."""
        _, pools, _ = self._env_state()
        return list(pools.values())

    def _close_environments(self) -> None:
        lock, pools, _ = self._env_state()
        with lock:
            started = list(pools.values())
            pools.clear()
        for pool in started:
            pool.close()
