"""The weight-sync group (rlvr.rollout.weight_sync): the bucket plan and a broadcast between two ranks in one
process, bit for bit, for every dtype and layout (no Ray, no vLLM)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from rlvr.rollout.weight_sync import ALIGN, WeightGroup, bucket_size, buckets, tensor_aliases, tensor_meta


def test_bucket_plan_is_aligned_and_bounded() -> None:
    meta = [("a", "float32", (10,)), ("b", "bfloat16", (3,)), ("big", "float32", (100,)), ("c", "int64", (2,))]
    plan = buckets(meta, limit=128)
    assert [[s.index for s in b] for b in plan] == [[0, 1], [2], [3]]  # 400 bytes goes alone
    assert all(s.offset % ALIGN == 0 for b in plan for s in b)
    assert all(bucket_size(b) <= 128 for b in plan if len(b) > 1)
    assert sum(s.nbytes for b in plan for s in b) == 40 + 6 + 400 + 16


def test_weight_group_broadcasts_every_dtype_and_layout() -> None:
    """Two ranks in one process (threads): what rank 0 sends is what rank 1 receives, bit for bit."""
    g = torch.Generator().manual_seed(0)
    pairs = [("w", torch.randn(3, 5, generator=g)), ("half", torch.randn(7, generator=g).to(torch.bfloat16)),
             ("ids", torch.arange(4, dtype=torch.int64).reshape(2, 2)), ("mask", torch.tensor([True, False, True])),
             ("t", torch.randn(5, 3, generator=g).t()), ("scalar", torch.tensor(2.5)), ("empty", torch.zeros(0, 4)),
             ("large", torch.randn(300, generator=g))]
    pairs.append(("tied", pairs[0][1]))  # the very same tensor under another name: sent once, received twice
    pairs.append(("view", pairs[0][1].reshape(15)))  # same memory, another shape: sent as its own tensor
    store = WeightGroup.host_store("127.0.0.1", 2, timeout_s=30)
    with ThreadPoolExecutor(2) as pool:
        joining = pool.submit(WeightGroup.open, "127.0.0.1", store.port, 1, 2, "gloo", timeout_s=30)
        sender = WeightGroup.open("127.0.0.1", store.port, 0, 2, "gloo", store=store, timeout_s=30)
        receiver = joining.result(timeout=30)
        sender.bucket_bytes = receiver.bucket_bytes = 256  # several buckets
        meta, aliases = tensor_meta(pairs), tensor_aliases(pairs)
        got = pool.submit(lambda: [(k, v.clone()) for k, v in receiver.receive(meta, aliases)])
        sent = sender.send(pairs, aliases)
        received = got.result(timeout=30)
    assert aliases == {len(pairs) - 2: 0}
    assert len(buckets(meta, 256, aliases)) >= 3
    assert sent == sum(t.numel() * t.element_size() for _, t in pairs[:-2]) + pairs[-1][1].numel() * 4
    assert sorted(k for k, _ in received) == sorted(k for k, _ in pairs)
    want = dict(pairs)
    for name, have in received:
        assert have.dtype == want[name].dtype and have.shape == want[name].shape and torch.equal(have, want[name])
    sender.close()
    receiver.close()
