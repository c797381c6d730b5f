"""One-line errors from what a model does not declare: `unknown_key` for models that ignore unknown keys."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from rlvr.tasks.problems import unknown_key


class Leaf(BaseModel):
    name: str = ""
    colour: str = ""


class Node(BaseModel):
    """Ignores extra keys itself, as a format's own library may."""

    timeout_sec: float = 1.0
    leaf: Leaf | None = None
    leaves: list[str | Leaf] = Field(default_factory=list)
    later: list["Later"] = Field(default_factory=list)
    free: dict[str, Any] = Field(default_factory=dict)


class Later(BaseModel):
    depth: int = 0


def test_unknown_keys_are_found_at_any_depth_with_near_misses() -> None:
    assert unknown_key({"timeout_sec": 2, "leaf": {"name": "x"}, "leaves": ["a", {"colour": "red"}],
                        "later": [{"depth": 1}], "free": {"anything": {"goes": 1}}}, Node) is None
    assert unknown_key({"timout_sec": 2}, Node) == ("timout_sec", ["timeout_sec"])
    assert unknown_key({"leaf": {"color": "red"}}, Node) == ("leaf.color", ["colour"])
    assert unknown_key({"leaves": ["a", {"nme": "b"}]}, Node) == ("leaves[1].nme", ["name"])
    assert unknown_key({"later": [{"depht": 2}]}, Node) == ("later[0].depht", ["depth"])  # forward reference
    assert unknown_key({"old": 1}, Node, {"Node": ("old",)}) is None  # renamed: its validator still reads it
