"""The storage layer against a real S3-compatible server (moto's server mode on 127.0.0.1) and locally."""
from __future__ import annotations

import json

import pytest

from rlvr.errors import UserError
from rlvr.store import EpisodeStore, Storage, objects
from rlvr.store.query import query
from tests.store.synthetic import episode


@pytest.fixture(scope="module")
def s3_endpoint():
    """A moto S3 server on loopback, with a bucket `runs`; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    mp = pytest.MonkeyPatch()
    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        mp.setenv(key, value)
    mp.delenv("AWS_ENDPOINT_URL", raising=False)
    Storage("s3://runs", {"endpoint_url": endpoint}).fs.mkdir("runs")
    yield endpoint
    mp.undo()
    server.stop()


def test_s3_episode_round_trip_and_query(s3_endpoint):
    opts = {"endpoint_url": s3_endpoint}
    store = EpisodeStore("s3://runs/exp1", storage_options=opts)
    eps = [episode(0, "t0", sample=i, reward=float(i % 2)) for i in range(4)]
    store.write(0, eps)
    store.write(1, [episode(1, "t1", flags=("tampering",))])
    again = EpisodeStore("s3://runs/exp1", storage_options=opts)
    assert again.steps() == [0, 1]
    assert again.episodes(steps=[0]) == eps
    assert again.storage.listdir("_tmp") == []
    rows = query(again, "SELECT step, count(*) AS n, sum(num_flags) AS f FROM episodes GROUP BY 1 ORDER BY 1")
    assert rows.to_pylist() == [{"step": 0, "n": 4, "f": 0}, {"step": 1, "n": 1, "f": 1}]


def test_s3_objects_put_get(s3_endpoint, tmp_path, monkeypatch):
    # Through the environment, as a trainer given only a URL would reach a non-AWS endpoint.
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    url = "s3://runs/exp2/checkpoints/step-3/model.pt"
    objects.put_bytes(url, b"\x00weights\xff" * 1000)
    assert objects.get_bytes(url) == b"\x00weights\xff" * 1000
    with objects.open_atomic("s3://runs/exp2/checkpoints/step-3/optim.pt") as f:
        f.write(b"optimizer state")
    with objects.open_read("s3://runs/exp2/checkpoints/step-3/optim.pt") as f:
        assert f.read() == b"optimizer state"
    local = tmp_path / "big.bin"
    local.write_bytes(b"x" * 300_000)
    objects.put_file(local, "s3://runs/exp2/checkpoints/step-3/big.bin")
    assert objects.get_file("s3://runs/exp2/checkpoints/step-3/big.bin", tmp_path / "back.bin").read_bytes() \
        == b"x" * 300_000
    assert objects.list_names("s3://runs/exp2/checkpoints/step-3") == ["big.bin", "model.pt", "optim.pt"]
    assert objects.exists(url)
    objects.delete("s3://runs/exp2/checkpoints/step-3")
    assert not objects.exists(url)


def test_s3_objects_with_explicit_options(s3_endpoint):
    opts = {"endpoint_url": s3_endpoint}
    with objects.open_atomic("s3://runs/exp4/ckpt/model.pt", opts) as f:
        f.write(b"state")
    assert objects.get_bytes("s3://runs/exp4/ckpt/model.pt", opts) == b"state"
    assert objects.list_names("s3://runs/exp4/ckpt", opts) == ["model.pt"]


def test_cli_query_reads_an_s3_run(s3_endpoint, cli, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    EpisodeStore("s3://runs/exp3").write(2, [episode(2, "t9", reward=1.0)])
    res = cli(["query", "s3://runs/exp3", "SELECT task_id, passed FROM episodes", "--json"])
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout) == [{"task_id": "t9", "passed": True}]


def test_local_put_is_atomic_and_cleans_up(tmp_path):
    storage = Storage(str(tmp_path))
    storage.put_bytes("a/b.bin", b"one")
    with pytest.raises(TypeError):
        storage.put_bytes("a/b.bin", "not bytes")  # type: ignore[arg-type]
    assert storage.get_bytes("a/b.bin") == b"one"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b.bin"]


def test_paths_cannot_escape_the_root(tmp_path):
    with pytest.raises(ValueError, match="escapes"):
        Storage(str(tmp_path)).put_bytes("../outside.bin", b"x")


@pytest.mark.parametrize("url", ["", "nosuchproto://bucket/run"])
def test_bad_urls_are_user_errors(url):
    with pytest.raises(UserError):
        Storage(url)


def test_any_fsspec_filesystem_works_like_a_path():
    store = EpisodeStore("memory://rlvr-test-store/run")
    store.write(0, [episode(0, "t")])
    store.write(3, [episode(3, "u", reward=1.0)])
    assert store.steps() == [0, 3] and not store.storage.is_local
    assert query(store, "SELECT sum(passed::INT) AS p FROM episodes").to_pylist() == [{"p": 1}]
    store.storage.delete("", recursive=True)
