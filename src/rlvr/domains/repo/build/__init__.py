"""The task builder: real Python projects turned into bug-fix and implementation tasks (`rlvr tasks build
repo`).

SWE-smith's recipe on a project whose tests pass: fetch it (`source`), install its test dependencies into an
environment made for it (`env`), run its suite twice in the sandbox and keep the tests that pass both times in
time (`runner`), break it with several generators (`generators`), and keep a break only when some kept test
fails and the others pass (`builder`), written as standard task directories.

The builder runs its commands through a sandbox pool it is given (`PoolFactory`): `tasks` sits below `sandbox`
in the pipeline, so the command line builds the pool and passes it down.
"""
from __future__ import annotations

from rlvr.domains.repo.build.builder import BuildReport, ProjectReport, build

__all__ = ["BuildReport", "ProjectReport", "build"]
