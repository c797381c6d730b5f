"""The repository domains: `repo` (mutants of the small projects shipped in `projects/`) and `repo-real`
(tasks built from real PyPI projects by `build/`, `rlvr tasks build repo`), judged by the `code` kind; their
multi-turn tasks get a bash terminal."""
from rlvr.domains.repo.real import RepoRealConfig, RepoRealSource
from rlvr.domains.repo.source import RepoConfig, RepoSource
from rlvr.envs.tools import BASH
from rlvr.tasks.domain import Domain

REPO = Domain("repo", RepoSource, RepoConfig, verifier="code", tools=(BASH,),
              description="Bug-fix and feature tasks in small Python projects (fail-to-pass + "
                          "pass-to-pass tests).")
REPO_REAL = Domain("repo-real", RepoRealSource, RepoRealConfig, verifier="code", tools=(BASH,),
                   description="Bug-fix and implementation tasks in real Python projects (built by `make "
                               "repo-real`).")
DOMAINS = (REPO, REPO_REAL)
