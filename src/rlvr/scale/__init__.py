"""The cluster (needs rlvr[ray]; local stays the default): `cluster` connects to Ray, places actors and starts
and stops them for every user of Ray in rlvr; `ray_pool` is the sandbox pool as actors across the nodes.

`open_pool(sandbox, cluster)` is how a run gets its sandbox pool (`rlvr.run.build`): the local isolated pool,
or — when `[cluster] address` is set (or `--cluster ADDRESS`) — a `RayPool` of pool actors across the cluster,
with no other change to the run.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr.errors import UserError

if TYPE_CHECKING:
    from rlvr.config import ClusterConfig, SandboxConfig
    from rlvr.sandbox.base import SandboxPool


def open_pool(sandbox: SandboxConfig, cluster: ClusterConfig) -> SandboxPool:
    """A run's sandbox pool from its `[sandbox]` and `[cluster]` sections: local, or on Ray when
    `cluster.address` is set."""
    if not cluster.address:
        from rlvr.sandbox import make_pool

        return make_pool(sandbox)
    try:
        from rlvr.scale.ray_pool import RayPool
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("ray"):
            raise UserError("running on a cluster needs Ray", field="cluster.address",
                            fix="pip install 'rlvr[ray]'") from None
        raise
    return RayPool(cluster.address, sandbox, fleet=cluster)
