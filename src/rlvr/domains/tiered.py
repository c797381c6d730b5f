"""What the domains whose tasks come from a catalogue of kinds in tiers share (c, sql, shell): names checked
against the catalogue with a "did you mean", and a procedural source whose task i picks its kind from
Random(seed + i) within its tier (the tier cycles with the index unless the settings fix one)."""
from __future__ import annotations

import difflib
import random
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.errors import UserError
from rlvr.tasks.source import ProceduralSource

TIERS = ("easy", "medium", "hard")
"""The tiers, easiest first."""
DIFFICULTY = {"easy": 0.3, "medium": 0.5, "hard": 0.7}
"""A tier's prior difficulty."""


def known_names(names: tuple[str, ...] | None, known: Mapping[str, Any], what: str) -> tuple[str, ...] | None:
    """`names`, each one of `known`'s keys; a ValueError (a settings error) names the first that is not."""
    for name in names or ():
        if name not in known:
            near = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ValueError(f"unknown {what} {name!r}{hint} (known: {', '.join(sorted(known))})")
    return names


class TieredConfig(BaseModel):
    """The settings every tiered domain has (`[tasks.domains.<name>]`); a domain's own add to them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Task i is drawn from Random(seed + i)."""
    tier: Literal["easy", "medium", "hard"] | None = None
    """Only this tier (None: the tiers take turns with the index, easy, medium, hard)."""
    max_turns: int = Field(16, ge=1)
    """Turns of an episode (the agent works with tools over several)."""


class TieredSource(ProceduralSource):
    """Task i: a kind of the catalogue (its values have a `tier`), drawn from Random(seed + i) among those of
    the index's tier that the settings leave (`allowed`); ids are `<kind>-s<seed>-<index>`. The config has
    `seed` and `tier`."""

    catalogue: Mapping[str, Any]
    field = "kinds"
    """The settings field that narrows the catalogue (named in the error when nothing is left)."""

    def allowed(self, name: str, entry: Any) -> bool:
        """Whether the settings let kind `name` be drawn: by default, when the settings field named `field`
        is unset or names it."""
        chosen = getattr(self.config, self.field, None)
        return chosen is None or name in chosen

    def names(self, tier: str) -> list[str]:
        """The kinds of `tier` the settings leave."""
        return sorted(n for n, e in self.catalogue.items() if e.tier == tier and self.allowed(n, e))

    def pick(self, index: int, rng: random.Random) -> tuple[str, Any]:
        """(tier, kind) of task `index`: the first draw of its Random. Unless the settings fix a tier, the
        tiers that have kinds left take turns."""
        tiers = [self.config.tier] if self.config.tier else [t for t in TIERS if self.names(t)]
        names = self.names(tiers[index % len(tiers)]) if tiers else []
        if not names:
            where = f"of tier {self.config.tier!r} " if self.config.tier else ""
            raise UserError(f"no {self.name} task {where}is left by the settings",
                            field=f"tasks.domains.{self.name}.{self.field}",
                            fix="leave at least one kind of the tier drawn from, or another tier")
        return tiers[index % len(tiers)], self.catalogue[rng.choice(names)]

    def id_at(self, index: int) -> str:
        _, kind = self.pick(index, random.Random(self.config.seed + index))
        return f"{kind.name}-s{self.config.seed}-{index}"
