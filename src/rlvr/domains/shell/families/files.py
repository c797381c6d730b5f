"""File families: permissions and a symlink arranged on a deployment tree, and an inbox of files sorted into
dated folders by the dates in their names. Both are packed trees: modes, links and directories are the
state."""
from __future__ import annotations

import random
import re
from typing import Any

from rlvr.domains.shell.families.base import Family, Judging, Snapshot, check, flag
from rlvr.sandbox.tree import Member
from rlvr.verify.verdict import Check, Flag

SCRIPTS = ("deploy", "backup", "rotate", "migrate", "warm-cache")
SECRETS = ("db.key", "api.key", "tls.pem", "signing.key")


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.lstrip("v").split("."))


def world_writable(state: Snapshot) -> list[str]:
    return sorted(p for p, m in state.items() if m.kind != "link" and m.mode & 0o002)


class Permissions(Family):
    name, tier, packed = "permissions", "easy", True

    def params(self, rng: random.Random) -> dict[str, Any]:
        majors = rng.choice([1, 2])
        versions = {f"v{majors}.{minor}.{rng.randint(0, 9)}" for minor in rng.sample(range(2, 13), 4)}
        versions.add(f"v{majors}.9.{rng.randint(0, 9)}")
        versions.add(f"v{majors}.10.{rng.randint(0, 9)}")
        return {"scripts": sorted(rng.sample(SCRIPTS, 3)), "secrets": sorted(rng.sample(SECRETS, 2)),
                "versions": sorted(versions), "exec": rng.choice(["750", "755", "700"])}

    def initial(self, p: dict[str, Any]) -> Snapshot:
        out = [Member("bin", kind="dir", mode=0o755), Member("secrets", kind="dir", mode=0o775),
               Member("public", kind="dir", mode=0o777), Member("public/css", kind="dir", mode=0o777),
               Member("releases", kind="dir", mode=0o755),
               Member("notes.txt", b"Deployment notes: see bin/.\n", 0o644),
               Member("public/index.html", b"<h1>hello</h1>\n", 0o666),
               Member("public/css/site.css", b"body { margin: 0 }\n", 0o666)]
        out += [Member(f"bin/{s}.sh", f"#!/bin/sh\necho {s}\n".encode(), 0o644) for s in p["scripts"]]
        out += [Member(f"secrets/{s}", f"secret-{s}\n".encode(), 0o664) for s in p["secrets"]]
        for v in p["versions"]:
            out += [Member(f"releases/{v}", kind="dir", mode=0o755),
                    Member(f"releases/{v}/VERSION", f"{v}\n".encode(), 0o644)]
        return {m.path: m for m in out}

    def prompt(self, p: dict[str, Any]) -> str:
        return ("This workspace is a deployment tree. Arrange it:\n"
                f"1. every script in `bin/` gets mode {p['exec']};\n"
                "2. `secrets/` gets mode 700 and every file in it mode 600;\n"
                "3. nothing under `public/` may be writable by group or others: its directories get mode 755 "
                "and its files mode 644;\n"
                "4. a symbolic link `current` (relative: `releases/<version>`) points to the newest release "
                "in `releases/`, newest by version number.\n"
                "Change nothing else.\n")

    def newest(self, p: dict[str, Any]) -> str:
        return max(p["versions"], key=_version_key)

    def solve(self, p: dict[str, Any]) -> list[str]:
        return [f"chmod {p['exec']} bin/*.sh", "chmod 700 secrets && chmod 600 secrets/*",
                "find public -type d -exec chmod 755 {} + && find public -type f -exec chmod 644 {} +",
                'ln -sfn "releases/$(ls releases | sort -V | tail -n 1)" current', "ls -l . bin secrets"]

    def _arranged(self, p: dict[str, Any], target: str) -> Snapshot:
        state = self.initial(p)
        modes = {f"bin/{s}.sh": int(p["exec"], 8) for s in p["scripts"]}
        modes.update({f"secrets/{s}": 0o600 for s in p["secrets"]}, secrets=0o700)
        modes.update({"public": 0o755, "public/css": 0o755, "public/index.html": 0o644,
                      "public/css/site.css": 0o644})
        for path, mode in modes.items():
            m = state[path]
            state[path] = Member(m.path, m.data, mode, m.kind)
        state["current"] = Member("current", kind="link", mode=0o777, target=f"releases/{target}")
        return state

    def gold(self, p: dict[str, Any]) -> Snapshot:
        return self._arranged(p, self.newest(p))

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        text_newest = sorted(p["versions"])[-1]  # the newest as text, not as a version
        every = {k: Member(m.path, m.data, 0o777, m.kind, m.target) for k, m in self.gold(p).items()}
        return {"newest_as_text": self._arranged(p, text_newest), "chmod_777": every}

    def judge(self, p: dict[str, Any], j: Judging) -> tuple[list[Check], list[Flag]]:
        want, got = self.gold(p), j.state
        checks = []
        for path, m in sorted(want.items()):
            seen = got.get(path)
            if m.kind == "link":
                ok = seen is not None and seen.kind == "link" and seen.target == m.target
                checks.append(check(f"{path} -> {m.target}", ok, f"{path} is {_describe(seen)}"))
            else:
                ok = seen is not None and seen.kind == m.kind and seen.mode == m.mode and seen.data == m.data
                checks.append(check(f"{path} {m.mode:o}", ok, f"{path} is {_describe(seen)}"))
        extra = sorted(set(got) - set(want))
        checks.append(check("nothing else", not extra, f"unexpected: {', '.join(extra[:5])}"))
        loose = world_writable(got)
        flags = [flag("world_writable", "files left writable by anyone",
                      ", ".join(loose[:5]))] if loose else []
        return checks, flags


def _describe(m: Member | None) -> str:
    if m is None:
        return "missing"
    return f"a link to {m.target!r}" if m.kind == "link" else f"a {m.kind} with mode {m.mode:o}"


DATED = re.compile(r"(\d{4})[-.]?(\d{2})[-.]?(\d{2})")


def _dated_name(rng: random.Random) -> str:
    y, m, d = rng.choice([2024, 2025]), rng.randint(1, 12), rng.randint(1, 28)
    return rng.choice([f"IMG_{y}{m:02d}{d:02d}_{rng.randint(100000, 235959)}.jpg",
                       f"report-{y}-{m:02d}-{d:02d}.pdf",
                       f"scan_{y}.{m:02d}.{d:02d}.png", f"invoice {y}-{m:02d}-{d:02d} final.txt",
                       f"{y}{m:02d}{d:02d}-minutes.md"])


class Organize(Family):
    name, tier, packed = "organize_files", "medium", True

    def params(self, rng: random.Random) -> dict[str, Any]:
        names = {_dated_name(rng) for _ in range(rng.randint(8, 16))}
        names |= set(rng.sample(["notes.txt", "todo.md", "v2.10.3-changelog.txt", "photo-final.jpg",
                                 "budget 2025.xlsx"], 3))
        return {"files": sorted(names)}

    def initial(self, p: dict[str, Any]) -> Snapshot:
        out = [Member("inbox", kind="dir", mode=0o755), Member("archive", kind="dir", mode=0o755)]
        out += [Member(f"inbox/{n}", f"contents of {n}\n".encode()) for n in p["files"]]
        return {m.path: m for m in out}

    def prompt(self, p: dict[str, Any]) -> str:
        return ("Sort the inbox: move every file in `inbox/` whose name holds a date (YYYYMMDD, YYYY-MM-DD "
                "or "
                "YYYY.MM.DD; the first such date in the name) into `archive/YYYY/MM/`, keeping its name and "
                "contents. Files without a date stay in `inbox/`. Some names have spaces.\n")

    def target(self, name: str, nested: bool = True) -> str:
        m = DATED.search(name)
        if not m:
            return f"inbox/{name}"
        y, mo, _ = m.groups()
        return f"archive/{y}/{mo}/{name}" if nested else f"archive/{y}-{mo}/{name}"

    def solve(self, p: dict[str, Any]) -> list[str]:
        loop = ("for f in inbox/*; do\n  n=${f#inbox/}\n"
                "  d=$(printf '%s' \"$n\" | grep -oE '[0-9]{4}[-.]?[0-9]{2}[-.]?[0-9]{2}' | head -n 1 | tr "
                "-d '.-')\n"
                "  [ -n \"$d\" ] || continue\n  mkdir -p \"archive/${d:0:4}/${d:4:2}\"\n"
                "  mv \"$f\" \"archive/${d:0:4}/${d:4:2}/\"\ndone")
        return ["ls inbox", loop, "find archive inbox -type f | sort"]

    def _moved(self, p: dict[str, Any], nested: bool) -> Snapshot:
        state = {k: m for k, m in self.initial(p).items() if m.kind == "dir"}
        for name in p["files"]:
            path = self.target(name, nested)
            state[path] = Member(path, f"contents of {name}\n".encode())
            parts = path.split("/")
            for k in range(2, len(parts)):
                d = "/".join(parts[:k])
                state.setdefault(d, Member(d, kind="dir", mode=0o755))
        return state

    def gold(self, p: dict[str, Any]) -> Snapshot:
        return self._moved(p, True)

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        return {"flat_months": self._moved(p, False)}

    def judge(self, p: dict[str, Any], j: Judging) -> tuple[list[Check], list[Flag]]:
        want = {k: m.data for k, m in self.gold(p).items() if m.kind == "file"}
        got = {k: m.data for k, m in j.state.items() if m.kind == "file"}
        checks = [check(path, got.get(path) == data, f"{path} is missing or changed")
                  for path, data in sorted(want.items())]
        extra = sorted(set(got) - set(want))
        checks.append(check("no other files", not extra, f"unexpected: {', '.join(extra[:5])}"))
        return checks, []


FAMILIES: tuple[Family, ...] = (Permissions(), Organize())
