"""Symbolic links of a final workspace: inside ones read as what they lead to, those out of it refused."""
from __future__ import annotations

import os
from pathlib import Path

from rlvr import links
from rlvr.tasks.loaders import read_workspace, refused_links


def _tree(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "sub" / "b.py").write_text("B = 2\n")
    (root / "outside").mkdir()
    (root / "outside" / "fixed.py").write_text("FIXED = 1\n")
    ws = root / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "a.py").write_text("A = 1\n")
    (ws / "pkg" / "sub").mkdir()
    (ws / "pkg" / "sub" / "b.py").write_text("B = 2\n")
    os.symlink("pkg/a.py", ws / "rel.py")
    os.symlink("/workspace/pkg/sub", ws / "abs_dir")  # the sandbox's own path for the workspace
    os.symlink(str(ws / "pkg" / "a.py"), ws / "host_abs.py")
    os.symlink("rel.py", ws / "chain.py")
    os.symlink("../outside/fixed.py", ws / "up.py")
    os.symlink(str(root / "outside"), ws / "out_dir")
    os.symlink("loop_b", ws / "loop_a")
    os.symlink("loop_a", ws / "loop_b")
    os.symlink("missing.py", ws / "dangling.py")
    os.symlink("pkg/../../outside/fixed.py", ws / "sneaky.py")
    return ws


def test_links_are_resolved_inside_the_workspace_only(tmp_path: Path) -> None:
    ws = _tree(tmp_path)
    inside, outside = links.classify(ws)
    assert inside == {"rel.py": "pkg/a.py", "abs_dir": "pkg/sub", "host_abs.py": "pkg/a.py",
                      "chain.py": "pkg/a.py"}
    assert outside == ["out_dir", "sneaky.py", "up.py"]  # loops and dangling links lead nowhere: neither
    assert links.through(ws, inside) == {"rel.py": "pkg/a.py", "abs_dir/b.py": "pkg/sub/b.py",
                                         "host_abs.py": "pkg/a.py", "chain.py": "pkg/a.py"}


def test_rlvr_verify_reads_inside_links_and_names_the_refused(tmp_path: Path) -> None:
    ws = _tree(tmp_path)
    files = read_workspace(ws)
    assert files["rel.py"] == files["chain.py"] == "A = 1\n" and files["abs_dir/b.py"] == "B = 2\n"
    assert not {"up.py", "out_dir/fixed.py", "sneaky.py", "dangling.py"} & set(files)
    assert refused_links(ws) == ["out_dir", "sneaky.py", "up.py"]


def test_the_sandbox_reader_reads_inside_links(tmp_path: Path) -> None:
    from rlvr.sandbox.workspace import read_files

    ws = _tree(tmp_path)
    files = read_files(ws)
    assert files["rel.py"] == "A = 1\n" and files["abs_dir/b.py"] == "B = 2\n" and "up.py" not in files
