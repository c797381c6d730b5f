"""What git says of a final repository (`facts`), asked so that nothing of the candidate's runs: its
configuration is replaced by a minimal one and its hooks removed first, and only plumbing is asked (no status,
no diff); the work tree is compared with HEAD's tree here, by hash. And the small project whose histories the
git tasks are written from (`history`, `build`)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from rlvr.domains.shell.families.base import Judging, Snapshot, check
from rlvr.domains.shell.gitrepo import Repo, blob_id
from rlvr.verify.verdict import Check

FACTS = r"""
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME=/tmp GIT_TERMINAL_PROMPT=0
export GIT_OPTIONAL_LOCKS=0 LC_ALL=C
[ -d .git ] || { echo NOREPO; exit 0; }
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n' > .git/config
rm -rf .git/hooks .git/info
git symbolic-ref -q HEAD || git rev-parse -q --verify HEAD || echo none
printf '\035'
git for-each-ref --format='%(refname) %(objectname) %(objecttype) %(*objectname)' refs/heads refs/tags
printf '\035'
git for-each-ref --format='%(refname)%1f%(contents)%1e' refs/tags
printf '\035'
git log --branches --tags --format='%H %T %P%x1f%B%x1e'
printf '\035'
git rev-list --objects --branches --tags | sed -n 's/^[0-9a-f]* //p'
printf '\035'
git ls-tree -r HEAD 2>/dev/null
"""
SEP = "\035"


@dataclass
class Facts:
    """What git says of a final repository."""

    head: str = ""
    """`refs/heads/NAME`, a commit hash (detached), or empty when there is no repository."""
    refs: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """ref -> (object, its type, the commit a tag points to)."""
    tags: dict[str, str] = field(default_factory=dict)
    """tag ref -> an annotated tag's message."""
    commits: dict[str, tuple[str, list[str], str]] = field(default_factory=dict)
    """commit -> (tree, parents, message) for every commit of a branch or a tag."""
    paths: set[str] = field(default_factory=set)
    """Every path any branch or tag holds in any of its commits."""
    head_files: dict[str, tuple[str, str]] = field(default_factory=dict)
    """path -> (mode, blob) of HEAD's tree."""

    def ref(self, name: str) -> str:
        return self.refs.get(name, ("", "", ""))[0]

    def chain(self, sha: str) -> list[str]:
        """`sha` and its first parents, newest first."""
        out = []
        while sha in self.commits and len(out) < 1000:
            out.append(sha)
            parents = self.commits[sha][1]
            sha = parents[0] if parents else ""
        return out


def facts(j: Judging) -> Facts:
    res = j.run(FACTS, timeout_s=30)
    if res.stdout.startswith("NOREPO") or res.exit_code != 0:
        return Facts()
    parts = (res.stdout.split(SEP) + [""] * 6)[:6]
    out = Facts(head=parts[0].strip())
    for line in parts[1].splitlines():
        bits = line.split()
        if len(bits) >= 3:
            out.refs[bits[0]] = (bits[1], bits[2], bits[3] if len(bits) > 3 else "")
    for rec in parts[2].split("\x1e"):
        name, _, msg = rec.strip("\n").partition("\x1f")
        if name:
            out.tags[name] = msg.strip()
    for rec in parts[3].split("\x1e"):
        head, _, msg = rec.strip("\n").partition("\x1f")
        bits = head.split()
        if len(bits) >= 2:
            out.commits[bits[0]] = (bits[1], bits[2:], msg.strip())
    out.paths = {line for line in parts[4].splitlines() if line}
    for line in parts[5].splitlines():
        meta, _, path = line.partition("\t")
        bits = meta.split()
        if len(bits) == 3:
            out.head_files[path] = (bits[0], bits[2])
    return out


def worktree_clean(j: Judging, f: Facts) -> Check:
    """The work tree holds exactly HEAD's files (nothing modified, added or left untracked)."""
    seen = {}
    for path, m in j.state.items():
        if path == ".git" or path.startswith(".git/") or m.kind == "dir":
            continue
        if m.kind == "link":
            seen[path] = ("120000", blob_id(m.target.encode()))
        else:
            seen[path] = ("100755" if m.mode & 0o100 else "100644", blob_id(m.data))
    diff = sorted(set(seen.items()) ^ set(f.head_files.items()))
    return check("the work tree is clean", not diff, "differs from HEAD at "
                                                     f"{', '.join(sorted({d[0] for d in diff})[:4])}")


WORDS = ("cache", "export", "parser", "retry", "config", "logging", "timeout", "metrics", "auth", "limits")


def history(rng: random.Random, n: int) -> list[tuple[str, dict[str, bytes]]]:
    """n commits of a small project: (message, the files after it)."""
    files = {"README.md": b"# inventory\n\nTracks stock levels.\n", ".gitignore": b"__pycache__/\n",
             "src/app.py": b"from src import util\n\n\ndef main():\n    return util.VERSION\n",
             "src/util.py": b"VERSION = '1.0'\n"}
    out = [("Initial commit", dict(files))]
    for k in range(1, n):
        word = rng.choice(WORDS)
        path = rng.choice(["src/app.py", "src/util.py", f"src/{word}.py", "README.md"])
        line = (f"- {word} notes ({k})\n" if path.endswith(".md") else f"{word.upper()}_{k} = "
                                                                       f"{rng.randint(1, 99)}\n")
        files = {**files, path: files.get(path, b"") + line.encode()}
        out.append((f"{rng.choice(['Add', 'Tune', 'Refactor', 'Document'])} {word} ({k})", dict(files)))
    return out


def build(commits: list[tuple[str, dict[str, bytes]]], repo: Repo | None = None,
          parent: str | None = None) -> tuple[Repo, list[str]]:
    """The commits written as a chain (on `parent`); returns the repo and their hashes, oldest first."""
    repo = repo or Repo()
    shas: list[str] = []
    for message, files in commits:
        prev = shas[-1] if shas else parent
        shas.append(repo.commit(files, [prev] if prev else [], message))
    return repo, shas


def state(repo: Repo, files: dict[str, bytes]) -> Snapshot:
    return {m.path: m for m in repo.members(files)}
