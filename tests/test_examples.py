"""Every config under examples/ loads under the strict config model (a renamed or mistyped field fails here,
not in a user's hands), and the training example's task settings are ones its domain accepts."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.config import load_config

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.toml"))


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_config_loads_and_its_tasks_resolve(path: Path) -> None:
    from rlvr.tasks import registry

    cfg = load_config(path)
    for domain, settings in cfg.tasks.domains.items():
        source = registry.make(domain, **settings)  # the dataset's own config checks its settings
        assert (source.size is None or source.size > 0) and source.get(0).prompt  # None: procedural
