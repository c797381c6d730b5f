"""A real local Ray cluster: a head node and one more worker node process on this machine."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def two_nodes() -> Iterator:
    """A head and one worker node of one CPU each, this process connected to them as the driver."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="session")
def ray_cluster():
    with two_nodes() as cluster:
        yield cluster
