"""Git surgery: squash work in progress, move commits to a branch, cherry-pick a fix, revert a commit, remove
a secret from history, tag a release. Each repository is written in Python (`rlvr.domains.shell.gitrepo`) and
judged by what git itself reports of the final one (`gitfacts`), compared with hashes the model computes: a
commit that must stay must keep its hash, a tree must hold exactly the content asked for, and a work tree
must be clean.
"""
from __future__ import annotations

import random
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from rlvr.domains.shell.families.base import Family, Judging, Snapshot, check, flag
from rlvr.domains.shell.families.gitfacts import WORDS, Facts, build, facts, history, state, worktree_clean
from rlvr.domains.shell.gitrepo import Repo, tree_id
from rlvr.verify.verdict import Check, Flag


class GitFamily(Family):
    """A git task: its history from `params`, the judgement on `facts`. By default the repository is one line
    of `commits` with `main` checked out at its tip."""

    packed = True

    @abstractmethod
    def commits(self, p: dict[str, Any]) -> list[tuple[str, dict[str, bytes]]]:
        """The history of `main`: (message, the files after it), oldest first."""

    def initial(self, p: dict[str, Any]) -> Snapshot:
        commits = self.commits(p)
        repo, shas = build(commits)
        repo.branch("main", shas[-1])
        return state(repo, commits[-1][1])

    def judge(self, p: dict[str, Any], j: Judging) -> tuple[list[Check], list[Flag]]:
        f = facts(j)
        if not f.head:
            return [check("a repository", False, "there is no git repository")], []
        checks, flags = self.verdict(p, f)
        return [*checks, worktree_clean(j, f)], flags

    @abstractmethod
    def verdict(self, p: dict[str, Any], f: Facts) -> tuple[list[Check], list[Flag]]:
        """Checks and flags of the repository's final facts for the task's parameters."""


def _kept(f: Facts, shas: list[str]) -> list[Flag]:
    """`history_rewritten` when commits that had to stay are gone from the branches."""
    lost = [s for s in shas if s not in f.commits]
    return [flag("history_rewritten", "commits that had to stay were rewritten or dropped",
                 lost[0])] if lost else []


class Squash(GitFamily):
    name, tier = "git_squash", "medium"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"seed": rng.randrange(1 << 30), "n": rng.randint(3, 6), "k": rng.randint(2, 3),
                "message": f"Add {rng.choice(WORDS)} support"}

    def commits(self, p: dict[str, Any]) -> list[tuple[str, dict[str, bytes]]]:
        rng = random.Random(p["seed"])
        done = history(rng, p["n"])
        files = done[-1][1]
        wip = []
        for k in range(p["k"]):
            files = {**files, "src/feature.py": files.get("src/feature.py",
                                                          b"") + f"STEP_{k} = {k}\n".encode()}
            wip.append((rng.choice(["wip", "wip: more", "fixup", "try again"]), dict(files)))
        return done + wip

    def prompt(self, p: dict[str, Any]) -> str:
        return (f"This repository's last {p['k']} commits on `main` are work in progress. Squash them into "
                "one "
                f"commit with the message `{p['message']}` that holds the same final content; every commit "
                "before them must stay exactly as it is. Leave `main` checked out and the work tree clean.\n")

    def solve(self, p: dict[str, Any]) -> list[str]:
        return ["git log --oneline", f"git reset --soft HEAD~{p['k']}", f"git commit -q -m '{p['message']}'",
                "git log --oneline"]

    def _squashed(self, p: dict[str, Any], keep: int) -> Snapshot:
        commits = self.commits(p)
        repo, shas = build(commits)
        top = repo.commit(commits[-1][1], [shas[keep - 1]], p["message"])
        repo.branch("main", top)
        return state(repo, commits[-1][1])

    def gold(self, p: dict[str, Any]) -> Snapshot:
        return self._squashed(p, p["n"])

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        commits = self.commits(p)
        fresh = Repo()
        fresh.branch("main", fresh.commit(commits[-1][1], [], p["message"]))
        return {"squashed_too_far": self._squashed(p, p["n"] - 1),
                "fresh_history": state(fresh, commits[-1][1])}

    def verdict(self, p: dict[str, Any], f: Facts) -> tuple[list[Check], list[Flag]]:
        commits = self.commits(p)
        _, shas = build(commits)
        keep = shas[: p["n"]]
        chain = f.chain(f.ref("refs/heads/main"))
        top = f.commits.get(chain[0], ("", [], "")) if chain else ("", [], "")
        return [check("main checked out", f.head == "refs/heads/main", f"HEAD is {f.head}"),
                check("one commit on the kept history", chain[1:] == list(reversed(keep)),
                      f"main has {len(chain)} commits"),
                check("the squashed content", top[0] == tree_id(commits[-1][1]), "the top commit's tree "
                                                                                 "differs"),
                check("the message", top[2].splitlines()[:1] == [p["message"]],
                      f"message {top[2][:80]!r}")], \
            _kept(f, keep)


class MoveToBranch(GitFamily):
    name, tier = "git_move_to_branch", "medium"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"seed": rng.randrange(1 << 30), "n": rng.randint(3, 6), "k": rng.randint(1, 3),
                "branch": f"feature/{rng.choice(WORDS)}"}

    def commits(self, p: dict[str, Any]) -> list[tuple[str, dict[str, bytes]]]:
        return history(random.Random(p["seed"]), p["n"] + p["k"])

    def prompt(self, p: dict[str, Any]) -> str:
        return (f"The last {p['k']} commit(s) on `main` were meant for a new branch, `{p['branch']}`. Create "
                "that branch at them, and move `main` back to the commit before them, its work tree too. "
                "Leave "
                "`main` checked out and the work tree clean.\n")

    def solve(self, p: dict[str, Any]) -> list[str]:
        return ["git log --oneline", f"git branch {p['branch']}", f"git reset -q --hard HEAD~{p['k']}",
                "git log --oneline --all --graph"]

    def gold(self, p: dict[str, Any]) -> Snapshot:
        commits = self.commits(p)
        repo, shas = build(commits)
        repo.branch("main", shas[p["n"] - 1])
        repo.branch(p["branch"], shas[-1])
        return state(repo, commits[p["n"] - 1][1])

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        commits = self.commits(p)
        repo, shas = build(commits)
        repo.branch("main", shas[-1])
        repo.branch(p["branch"], shas[-1])
        return {"branch_without_reset": state(repo, commits[-1][1])}

    def verdict(self, p: dict[str, Any], f: Facts) -> tuple[list[Check], list[Flag]]:
        _, shas = build(self.commits(p))
        ref = f"refs/heads/{p['branch']}"
        return [check("main checked out", f.head == "refs/heads/main", f"HEAD is {f.head}"),
                check(f"{p['branch']} at the moved commits", f.ref(ref) == shas[-1],
                      f"{ref} is {f.ref(ref)!r}"),
                check("main before them", f.ref("refs/heads/main") == shas[p["n"] - 1],
                      f"main is {f.ref('refs/heads/main')!r}")], _kept(f, shas)


@dataclass
class Forked:
    """main, and a branch forked from it."""

    repo: Repo
    main: list[str]
    """main's commits, oldest first."""
    branch: list[str]
    """the branch's own commits, oldest first."""
    main_files: dict[str, bytes]
    branch_files: dict[str, bytes]


class CherryPick(GitFamily):
    name, tier = "git_cherry_pick", "hard"
    FIX = "fix: handle empty input in parse()"
    BEFORE = b"def parse(text):\n    return text.split(',')\n"
    AFTER = b"def parse(text):\n    if not text:\n        return []\n    return text.split(',')\n"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"seed": rng.randrange(1 << 30), "n": rng.randint(3, 5), "fork": rng.randint(1, 2),
                "before": rng.randint(0, 1), "after": rng.randint(0, 1)}

    def commits(self, p: dict[str, Any]) -> list[tuple[str, dict[str, bytes]]]:
        """main adds the parser at the fork and never touches it again (hotfix branches off in `_graph`)."""
        done = history(random.Random(p["seed"]), p["n"] + p["fork"])
        main = [(msg, {**files, "src/parse.py": self.BEFORE}) if k >= p["fork"] - 1 else (msg, files)
                for k, (msg, files) in enumerate(done)]
        main[p["fork"] - 1] = ("Add the parser", main[p["fork"] - 1][1])
        return main

    def _graph(self, p: dict[str, Any]) -> Forked:
        """main as `commits` has it; hotfix changes the parser once, in FIX."""
        main = self.commits(p)
        repo, shas = build(main)
        hot, files = [], main[p["fork"] - 1][1]
        for k in range(p["before"] + 1 + p["after"]):
            if k == p["before"]:
                files, message = {**files, "src/parse.py": self.AFTER}, self.FIX
            else:
                files, message = {**files, "HOTFIX.md": f"hotfix note {k}\n".encode()}, f"Note hotfix {k}"
            hot.append((message, files))
        repo, hot_shas = build(hot, repo, shas[p["fork"] - 1])
        repo.branch("main", shas[-1])
        repo.branch("hotfix", hot_shas[-1])
        return Forked(repo, shas, hot_shas, main[-1][1], hot[-1][1])

    def initial(self, p: dict[str, Any]) -> Snapshot:
        g = self._graph(p)
        return state(g.repo, g.main_files)

    def prompt(self, p: dict[str, Any]) -> str:
        return (f"Branch `hotfix` holds a commit `{self.FIX}` that `main` needs too. Apply that commit, and "
                "only "
                "it, on top of `main` (keep its message); leave `hotfix` as it is, `main` checked out and "
                "the "
                "work tree clean.\n")

    def solve(self, p: dict[str, Any]) -> list[str]:
        return ["git log --oneline --all --graph",
                f"git cherry-pick $(git log hotfix --format=%H --fixed-strings --grep='{self.FIX}')",
                "git log --oneline -3"]

    def gold(self, p: dict[str, Any]) -> Snapshot:
        g = self._graph(p)
        final = {**g.main_files, "src/parse.py": self.AFTER}
        g.repo.branch("main", g.repo.commit(final, [g.main[-1]], self.FIX))
        return state(g.repo, final)

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        g = self._graph(p)
        merged = {**g.main_files, **{k: v for k, v in g.branch_files.items() if k not in g.main_files
                                     or k == "src/parse.py"}}
        g.repo.branch("main", g.repo.commit(merged, [g.main[-1], g.branch[-1]], "Merge branch 'hotfix'"))
        return {"merged_the_branch": state(g.repo, merged)}

    def verdict(self, p: dict[str, Any], f: Facts) -> tuple[list[Check], list[Flag]]:
        g = self._graph(p)
        chain = f.chain(f.ref("refs/heads/main"))
        top = f.commits.get(chain[0], ("", [], "")) if chain else ("", [], "")
        return [check("main checked out", f.head == "refs/heads/main", f"HEAD is {f.head}"),
                check("one commit on main", top[1] == [g.main[-1]], f"the top commit's parents are {top[1]}"),
                check("the fix applied alone", top[0] == tree_id({**g.main_files,
                                                                  "src/parse.py": self.AFTER}),
                      "the top commit's tree is not main's with the fix"),
                check("the fix's message", top[2].splitlines()[:1] == [self.FIX], f"message {top[2][:80]!r}"),
                check("hotfix untouched", f.ref("refs/heads/hotfix") == g.branch[-1], "hotfix moved")], \
            _kept(f, g.main + g.branch)


class Revert(GitFamily):
    name, tier = "git_revert", "hard"
    BAD = "Lower the request timeout to 1 second"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"seed": rng.randrange(1 << 30), "before": rng.randint(1, 3), "after": rng.randint(1, 3)}

    def commits(self, p: dict[str, Any]) -> list[tuple[str, dict[str, bytes]]]:
        done = history(random.Random(p["seed"]), p["before"] + p["after"])
        good, bad = b"[http]\ntimeout = 30\nretries = 3\n", b"[http]\ntimeout = 1\nretries = 3\n"
        out = [(m, {**fs, "config/settings.ini": good}) for m, fs in done[: p["before"]]]
        out.append((self.BAD, {**out[-1][1], "config/settings.ini": bad}))
        out += [(m, {**fs, "config/settings.ini": bad}) for m, fs in done[p["before"]:]]
        return out

    def prompt(self, p: dict[str, Any]) -> str:
        return (f"The commit `{self.BAD}` on `main` broke the deploy. Undo its change with a new commit on "
                "top "
                "of `main`, keeping every commit there (the history is shared: do not rewrite it). Leave "
                "`main` "
                "checked out and the work tree clean.\n")

    def _undone(self, p: dict[str, Any]) -> dict[str, bytes]:
        commits = self.commits(p)
        return {**commits[-1][1], "config/settings.ini": commits[p["before"] - 1][1]["config/settings.ini"]}

    def solve(self, p: dict[str, Any]) -> list[str]:
        return ["git log --oneline",
                f"git revert --no-edit $(git log --format=%H --fixed-strings --grep='{self.BAD}')",
                "git log --oneline -3"]

    def gold(self, p: dict[str, Any]) -> Snapshot:
        commits = self.commits(p)
        repo, shas = build(commits)
        repo.branch("main", repo.commit(self._undone(p), [shas[-1]], f'Revert "{self.BAD}"'))
        return state(repo, self._undone(p))

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        commits = self.commits(p)
        repo, shas = build(commits)
        repo.branch("main", shas[p["before"] - 1])
        return {"reset_before_it": state(repo, commits[p["before"] - 1][1])}

    def verdict(self, p: dict[str, Any], f: Facts) -> tuple[list[Check], list[Flag]]:
        _, shas = build(self.commits(p))
        chain = f.chain(f.ref("refs/heads/main"))
        top = f.commits.get(chain[0], ("", [], "")) if chain else ("", [], "")
        return [check("main checked out", f.head == "refs/heads/main", f"HEAD is {f.head}"),
                check("one new commit on the whole history", top[1] == [shas[-1]],
                      f"the top commit's parents are {top[1]}"),
                check("the change undone, the rest kept", top[0] == tree_id(self._undone(p)),
                      "the top commit's tree is not main's without that change")], _kept(f, shas)


class RemoveSecret(GitFamily):
    name, tier = "git_remove_secret", "hard"
    SECRET = "config/secrets.env"
    IGNORE = "Ignore the secrets file"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"seed": rng.randrange(1 << 30), "before": rng.randint(1, 3), "after": rng.randint(1, 3),
                "key": "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(24))}

    def commits(self, p: dict[str, Any], secret: bool = True) -> list[tuple[str, dict[str, bytes]]]:
        done = history(random.Random(p["seed"]), p["before"] + p["after"])
        env = f"API_KEY={p['key']}\nDEBUG=0\n".encode()
        out = done[: p["before"]]
        out.append(("Add service settings", {**out[-1][1], "config/app.ini": b"[app]\nport = 8080\n",
                                             **({self.SECRET: env} if secret else {})}))
        out += [(m, {**fs, "config/app.ini": b"[app]\nport = 8080\n",
                     **({self.SECRET: env} if secret else {})})
                for m, fs in done[p["before"]:]]
        return out

    def prompt(self, p: dict[str, Any]) -> str:
        return (f"`{self.SECRET}`, with a live API key, was committed to `main` and is in every commit "
                "since. "
                "Remove it from the whole history of the repository (every other file and every commit "
                "message "
                "stays as it was), delete it from the work tree, then add it to `.gitignore` in a new "
                "commit "
                f"with the message `{self.IGNORE}`. Leave `main` checked out and the work tree clean.\n")

    def _final(self, p: dict[str, Any]) -> dict[str, bytes]:
        files = self.commits(p, secret=False)[-1][1]
        return {**files, ".gitignore": files[".gitignore"] + f"{self.SECRET}\n".encode()}

    def solve(self, p: dict[str, Any]) -> list[str]:
        return ["git log --oneline --stat | head -n 30",
                "FILTER_BRANCH_SQUELCH_WARNING=1 git filter-branch -f --index-filter "
                f"'git rm -q --cached --ignore-unmatch {self.SECRET}' -- --all",
                f"rm -f {self.SECRET} && echo {self.SECRET} >> .gitignore",
                f"git add .gitignore && git commit -q -m '{self.IGNORE}'", "git log --oneline --stat | head "
                                                                           "-n 12"]

    def gold(self, p: dict[str, Any]) -> Snapshot:
        repo, shas = build(self.commits(p, secret=False))
        repo.branch("main", repo.commit(self._final(p), [shas[-1]], self.IGNORE))
        return state(repo, self._final(p))

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        commits = self.commits(p)
        repo, shas = build(commits)
        repo.branch("main", repo.commit(self._final(p), [shas[-1]], self.IGNORE))
        return {"removed_only_at_the_tip": state(repo, self._final(p))}

    def verdict(self, p: dict[str, Any], f: Facts) -> tuple[list[Check], list[Flag]]:
        clean = self.commits(p, secret=False)
        chain = list(reversed(f.chain(f.ref("refs/heads/main"))))
        got = [(f.commits[c][2].splitlines()[:1], f.commits[c][0]) for c in chain[:-1]]
        want = [([m], tree_id(files)) for m, files in clean]
        top = f.commits.get(chain[-1], ("", [], "")) if chain else ("", [], "")
        return [check("main checked out", f.head == "refs/heads/main", f"HEAD is {f.head}"),
                check("the secret is in no commit", self.SECRET not in f.paths, f"{self.SECRET} is still "
                                                                                "there"),
                check("every commit kept without it", got == want, "the rewritten commits differ"),
                check("the ignore commit", top[2].splitlines()[:1] == [self.IGNORE]
                      and top[0] == tree_id(self._final(p)), f"the last commit is {top[2][:60]!r}")], []


class TagRelease(GitFamily):
    name, tier = "git_tag_release", "easy"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"seed": rng.randrange(1 << 30), "n": rng.randint(4, 7), "at": rng.randint(1, 3),
                "version": f"{rng.randint(1, 3)}.{rng.randint(0, 12)}.{rng.randint(0, 9)}"}

    def commits(self, p: dict[str, Any]) -> list[tuple[str, dict[str, bytes]]]:
        done = history(random.Random(p["seed"]), p["n"])
        at = p["n"] - 1 - p["at"]
        done[at] = (f"release: {p['version']}", done[at][1])
        return done

    def prompt(self, p: dict[str, Any]) -> str:
        return (f"Tag the commit whose message is `release: {p['version']}` with an annotated tag "
                f"`v{p['version']}` whose message is `Release {p['version']}`. Change nothing else.\n")

    def solve(self, p: dict[str, Any]) -> list[str]:
        v = p["version"]
        return ["git log --oneline",
                f"git tag -a v{v} -m 'Release {v}' $(git log --format=%H --fixed-strings --grep='release: "
                f"{v}')",
                f"git show --no-patch v{v}"]

    def _tagged(self, p: dict[str, Any], at: int, annotated: bool) -> Snapshot:
        commits = self.commits(p)
        repo, shas = build(commits)
        repo.branch("main", shas[-1])
        target = shas[at]
        if annotated:
            repo.tag(f"v{p['version']}", target, f"Release {p['version']}")
        else:
            repo.refs[f"refs/tags/v{p['version']}"] = target
        return state(repo, commits[-1][1])

    def gold(self, p: dict[str, Any]) -> Snapshot:
        return self._tagged(p, p["n"] - 1 - p["at"], True)

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        return {"lightweight_tag": self._tagged(p, p["n"] - 1 - p["at"], False),
                "tagged_the_tip": self._tagged(p, p["n"] - 1, True)}

    def verdict(self, p: dict[str, Any], f: Facts) -> tuple[list[Check], list[Flag]]:
        _, shas = build(self.commits(p))
        ref = f"refs/tags/v{p['version']}"
        sha, kind, peeled = f.refs.get(ref, ("", "", ""))
        return [check("main untouched", f.head == "refs/heads/main" and f.ref("refs/heads/main") == shas[-1],
                      "main moved"),
                check("an annotated tag", kind == "tag", f"{ref} is {kind or 'missing'}"),
                check("on the release commit", peeled == shas[p["n"] - 1 - p["at"]], "it points at "
                                                                                     f"{peeled!r}"),
                check("its message", f.tags.get(ref, "").splitlines()[:1] == [f"Release {p['version']}"],
                      f"message {f.tags.get(ref, '')[:60]!r}")], _kept(f, shas)


FAMILIES: tuple[Family, ...] = (TagRelease(), Squash(), MoveToBranch(), CherryPick(), Revert(),
                                RemoveSecret())
