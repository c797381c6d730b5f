"""RunConfig: TOML loading, dotted overrides, validation that raises, resolved config round trip."""
from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from rlvr.config import QUICKSTART, RunConfig, describe_fields, load_config
from rlvr.errors import UserError


def test_no_file_gives_the_defaults_and_the_quickstart_is_its_own_file() -> None:
    """The quickstart's tier and name are its file's, not defaults every command would inherit."""
    cfg = load_config()
    assert cfg == RunConfig() and cfg.name == "run" and cfg.tasks.domains == {}
    quick = load_config(QUICKSTART)
    assert quick.name == "quickstart" and quick.tasks.domains == {"code": {"tier": "tiny"}}


def test_toml_and_overrides(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('name = "exp"\n[train]\nlr = 3e-4\nsteps = 7\n[tasks.domains.code]\ntier = "tiny"\n')
    cfg = load_config(p,
                      ["train.lr=1e-4", "rollout.group_size=4", 'policy.model="hf:x"', "tasks.train=math:5"])
    assert cfg.name == "exp" and cfg.train.lr == 1e-4 and cfg.train.steps == 7
    assert cfg.rollout.group_size == 4 and cfg.policy.model == "hf:x"
    assert cfg.tasks.train == "math:5"  # unquoted strings fall back to plain strings
    assert cfg.tasks.domains == {"code": {"tier": "tiny"}}


def test_a_dotted_override_extends_a_table(tmp_path: Path) -> None:
    """`tasks.domains.code.seed=3` on the quickstart keeps its tier: replacing the table would train
    another."""
    assert load_config(QUICKSTART,
                       ["tasks.domains.code.seed=3"]).tasks.domains == {"code": {"tier": "tiny", "seed": 3}}
    assert load_config(QUICKSTART, ["tasks.domains.math.level=2"]).tasks.domains == {
        "code": {"tier": "tiny"}, "math": {"level": 2}}
    assert load_config(None, ["tasks.domains.math.level=2"]).tasks.domains == {"math": {"level": 2}}
    p = tmp_path / "c.toml"
    # a table in the file replaces the default, as documented
    p.write_text('[tasks.domains.math]\nlevel = 1\n')
    assert load_config(p, ["tasks.domains.math.level=2"]).tasks.domains == {"math": {"level": 2}}
    assert load_config(None, ["schedule.weights.code=2"]).schedule.weights == {"code": 2.0}


@pytest.mark.parametrize(
    ("text", "overrides", "needle"),
    [
        ("[train]\nlrr = 1\n", [], "did you mean 'train.lr'"),
        ("[trian]\nlr = 1\n", [], "did you mean 'train'"),
        ("[train]\nsteps = \"ten\"\n", [], "train.steps"),
        ("[train]\nlr = -1\n", [], "train.lr"),
        ("[train\n", [], "TOML syntax error"),
        ("", ["train.nope=3"], "train.nope"),
        ("", ["train"], "KEY=VALUE"),
        ("", ["train.lr.x=3"], "train.lr"),
        ("[schedule]\nband_low = 0.9\nband_high = 0.1\n", [], "band_low"),
        ("[sandbox]\nisolation = \"docker\"\n", [], "sandbox.isolation"),
    ],
)
def test_invalid(tmp_path: Path, text: str, overrides: list[str], needle: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(UserError) as exc:
        load_config(p, overrides)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_never_rewrites_values(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[train]\nsteps = 3.0\n")  # a float where an int is expected: refused, not truncated
    with pytest.raises(UserError, match="train.steps"):
        load_config(p)
    p.write_text('[train]\nlr = "0.1"\n')  # a string is not silently parsed as a number
    with pytest.raises(UserError, match="train.lr"):
        load_config(p)


def test_missing_file() -> None:
    with pytest.raises(UserError, match="no such config file"):
        load_config("/nonexistent/x.toml")


def test_written_config_round_trips(tmp_path: Path) -> None:
    cfg = load_config(None, ["train.steps=3", "cluster.address=auto"])
    path = cfg.write(tmp_path / "run")
    data = tomllib.loads(path.read_text())
    assert RunConfig.model_validate(data) == cfg


def test_every_field_documented() -> None:
    rows = describe_fields()
    assert len(rows) > 40
    undocumented = [key for key, _, _, doc in rows if not doc]
    assert undocumented == []
