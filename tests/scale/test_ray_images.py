"""Images on the Ray pool (marker `images`, `make test-images`): leases in an image on a two-node local
cluster, a node's refusal as one line, a killed pool actor, and a node agent warming images before it
joins."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
import ray
from tests.sandbox.test_images_jail import BASE, ref

from rlvr.config import SandboxConfig
from rlvr.errors import UserError
from rlvr.sandbox import imagecache
from rlvr.sandbox.result import ExecStatus

pytestmark = pytest.mark.images


@pytest.fixture
def pool(ray_cluster):
    from rlvr.scale.ray_pool import RayPool

    p = RayPool(ray_cluster.address, SandboxConfig(workers=1, image_cache=str(imagecache.cache_dir())),
                slots_per_node=2)
    yield p
    p.close()


def test_leases_and_jobs_run_in_an_image_on_every_node(pool) -> None:
    for _ in range(4):  # leases go to the node with the fewest: both nodes unpack (or find) the image
        with pool.lease({"a.txt": "x"}, image=ref("python")) as sb:
            r = sb.run(["python", "-c", "import sys; print(sys.executable, open('a.txt').read())"])
            assert r.ok and r.stdout == "/usr/bin/python3 x\n", r.stderr
    r = pool.run(["sh", "-c", "cat /etc/debian_version; id -u"], image=BASE)
    assert r.ok and r.stdout.split()[1] == "65534"


def test_a_bad_image_or_a_refused_network_is_the_nodes_one_line(pool) -> None:
    with pytest.raises(UserError) as exc, pool.lease(image=f"dockerfile:{Path(__file__).parent / 'nowhere'}"):
        pass
    assert "not a build context directory" in str(exc.value) and "ray::" not in str(exc.value)
    with pytest.raises(UserError) as exc:
        pool.run(["true"], image=BASE, network=True)
    assert exc.value.field == "sandbox.allow_network"


def test_an_actor_killed_in_an_image_lease_is_an_infra_error_and_replaced(pool) -> None:
    with pool.lease(image=BASE) as sb:
        for h in pool.actor_handles():
            ray.kill(h)
        r = sb.run(["echo", "lost"])
        assert r.status is ExecStatus.infra_error
    with pool.lease(image=BASE) as sb:  # a new actor serves the image again
        assert sb.run(["echo", "back"]).stdout == "back\n"


def test_a_node_agent_warms_its_images_before_joining(tmp_path: Path) -> None:
    from rlvr.scale.node import NodeAgent

    log = io.StringIO()
    agent = NodeAgent("127.0.0.1:1", warm_images=[BASE, ref("noshell")], image_cache=str(tmp_path), log=log)
    agent.warm()
    cache = imagecache.Cache(tmp_path)
    assert {r.refs[0] for r in cache.entries()} == {BASE, str(imagecache.parse(ref("noshell")))}
    assert log.getvalue().count("ready") == 2
