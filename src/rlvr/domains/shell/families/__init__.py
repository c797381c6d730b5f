"""The shell domain's task families: each draws a workspace (text files, or a packed tree with modes, links
and git repositories), says what to do, knows the commands that do it (the gold trajectory), the state they
leave (the gold final state), the wrong states a cheater or a careless hand would leave, and how to judge a
final state: on the host from its files, and in the image where the task runs the candidate's own scripts on
fresh inputs or asks git about a repository.

Judging is binary: every check must pass. Each check names what it looked at; flags name the hacks.

The base of a family is in `base`; this package gathers the families.
"""
from __future__ import annotations

from rlvr.domains.shell.families.base import Family
from rlvr.domains.shell.families.build import FAMILIES as BUILD
from rlvr.domains.shell.families.cron import FAMILIES as CRON
from rlvr.domains.shell.families.files import FAMILIES as FILES
from rlvr.domains.shell.families.git import FAMILIES as GIT
from rlvr.domains.shell.families.text import FAMILIES as TEXT


def registry() -> dict[str, Family]:
    """Every family by name."""
    return {f.name: f for f in (*TEXT, *FILES, *CRON, *BUILD, *GIT)}

