"""The precompiled harness: each pyc is the shipped source, compiled, and is loaded without a source check."""
from __future__ import annotations

import importlib.util
import marshal
import sys

from rlvr.domains.code.harness import GUARDS, VALUES, WORKER, harness_bytecode, harness_files


def test_each_pyc_is_the_shipped_source_compiled_and_unchecked() -> None:
    pycs = harness_bytecode()
    assert set(pycs) == {f"__pycache__/{n.removesuffix('.py')}.{sys.implementation.cache_tag}.pyc"
                         for n in (WORKER, VALUES, GUARDS)}
    for name in (WORKER, VALUES, GUARDS):
        data = pycs[f"__pycache__/{name.removesuffix('.py')}.{sys.implementation.cache_tag}.pyc"]
        source = harness_files()[name].encode()
        assert data[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(data[4:8], "little") == 0b01  # hash-based, source not checked
        assert data[8:16] == importlib.util.source_hash(source)
        assert marshal.loads(data[16:]) == compile(source, name, "exec", dont_inherit=True)
