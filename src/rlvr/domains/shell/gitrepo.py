"""Git repositories written in Python, exactly as git writes them (loose objects, refs, an index), so a task's
repository is made without running git, byte for byte the same on every machine; and the hashes a verifier
compares with what git reports (a tree's hash is its content's identity).

    repo = Repo()
    c1 = repo.commit({"README": b"hi\\n"}, [], "first")
    repo.branch("main", c1)
    members = repo.members({"README": b"hi\\n"})   # .git/ and the work tree, for rlvr.sandbox.tree.pack
"""
from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Mapping

from rlvr.sandbox.tree import Member

Files = Mapping[str, bytes]
"""Path -> content of a tree's files (mode 100644; a path in `executable` is 100755)."""
AUTHOR = "Dev Team <dev@example.com>"
EPOCH = 1_767_225_600
"""2026-01-01: commits made here are an hour apart from it."""
CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"


def object_id(kind: str, body: bytes) -> str:
    """The sha1 git gives an object."""
    return hashlib.sha1(f"{kind} {len(body)}".encode() + b"\0" + body).hexdigest()


def blob_id(data: bytes) -> str:
    return object_id("blob", data)


def tree_id(files: Files, executable: frozenset[str] = frozenset(), links: Mapping[str,
                                                                                   str] | None = None) -> str:
    """The hash of the tree holding `files` (and symlinks `links`: path -> target), without storing it."""
    return Repo().tree(files, executable, links)


class Repo:
    """A repository being written: objects, refs and HEAD."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[str, bytes]] = {}
        self.refs: dict[str, str] = {}
        self.head = "refs/heads/main"
        self.clock = 0

    def _put(self, kind: str, body: bytes) -> str:
        sha = object_id(kind, body)
        self.objects[sha] = (kind, body)
        return sha

    def tree(self, files: Files, executable: frozenset[str] = frozenset(),
             links: Mapping[str, str] | None = None) -> str:
        """Store the tree of `files` (nested trees made from their paths); returns its hash."""
        entries: dict[str, tuple[str, str]] = {}
        subdirs: dict[str, dict[str, bytes]] = {}
        for path, data in files.items():
            head, _, rest = path.partition("/")
            if rest:
                subdirs.setdefault(head, {})[rest] = data
            else:
                entries[head] = ("100755" if path in executable else "100644", self._put("blob", data))
        for name, target in (links or {}).items():
            entries[name] = ("120000", self._put("blob", target.encode()))
        for name, sub in subdirs.items():
            inner = frozenset(p.split("/", 1)[1] for p in executable if p.startswith(name + "/"))
            entries[name] = ("40000", self.tree(sub, inner))
        def order(entry: tuple[str, tuple[str, str]]) -> str:  # a directory sorts as if it ended in /
            return entry[0] + ("/" if entry[1][0] == "40000" else "")
        body = b"".join(f"{mode} {name}".encode() + b"\0" + bytes.fromhex(sha)
                        for name, (mode, sha) in sorted(entries.items(), key=order))
        return self._put("tree", body)

    def commit(self, files: Files, parents: list[str], message: str, executable: frozenset[str] = frozenset(),
               author: str = AUTHOR) -> str:
        """Store a commit of `files` on `parents`, an hour after the previous one; returns its hash."""
        self.clock += 3600
        stamp = f"{EPOCH + self.clock} +0000"
        lines = [f"tree {self.tree(files, executable)}", *(f"parent {p}" for p in parents),
                 f"author {author} {stamp}", f"committer {author} {stamp}"]
        return self._put("commit", ("\n".join(lines) + "\n\n" + message.rstrip("\n") + "\n").encode())

    def tag(self, name: str, target: str, message: str) -> str:
        """An annotated tag `name` on commit `target`; returns the tag object's hash."""
        self.clock += 60
        body = (f"object {target}\ntype commit\ntag {name}\ntagger {AUTHOR} {EPOCH + self.clock} +0000\n\n"
                f"{message.rstrip()}\n")
        sha = self._put("tag", body.encode())
        self.refs[f"refs/tags/{name}"] = sha
        return sha

    def branch(self, name: str, sha: str) -> None:
        self.refs[f"refs/heads/{name}"] = sha

    def index(self, files: Files, executable: frozenset[str]) -> bytes:
        """A version 2 index of `files` (stat data zero: git re-reads the files once and finds them clean)."""
        out = [b"DIRC", struct.pack(">II", 2, len(files))]
        for path in sorted(files):
            data = files[path]
            mode = 0o100755 if path in executable else 0o100644
            name = path.encode()
            entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, mode, 0, 0,
                                len(data)) + bytes.fromhex(blob_id(data))
            entry += struct.pack(">H", min(len(name), 0xFFF)) + name
            entry += b"\0" * (8 - len(entry) % 8)
            out.append(entry)
        body = b"".join(out)
        return body + hashlib.sha1(body).digest()

    def members(self, worktree: Files, executable: frozenset[str] = frozenset()) -> list[Member]:
        """The repository (`.git/`) and its checked-out work tree, as tree members."""
        out = [Member(".git", kind="dir", mode=0o755), Member(".git/HEAD", f"ref: {self.head}\n".encode()),
               Member(".git/config", CONFIG), Member(".git/objects/info", kind="dir", mode=0o755),
               Member(".git/objects/pack", kind="dir", mode=0o755), Member(".git/refs/heads", kind="dir",
                                                                           mode=0o755),
               Member(".git/refs/tags", kind="dir", mode=0o755),
               Member(".git/index", self.index(worktree, executable))]
        for sha, (kind, body) in sorted(self.objects.items()):
            raw = zlib.compress(f"{kind} {len(body)}".encode() + b"\0" + body)
            out.append(Member(f".git/objects/{sha[:2]}/{sha[2:]}", raw, mode=0o444))
        out += [Member(f".git/{ref}", f"{sha}\n".encode()) for ref, sha in sorted(self.refs.items())]
        out += [Member(p, data, 0o755 if p in executable else 0o644) for p, data in worktree.items()]
        return out
