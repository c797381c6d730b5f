"""No import cycle anywhere in `rlvr`: the module graph read from the source with `ast` is acyclic.

What counts as an edge from module M:

- every `import` and `from ... import` statement in M, at module level and inside functions and classes (the
  lazy imports that keep torch or ray out of the core are edges too: they run the moment the function is
  called);
- the imports under `if TYPE_CHECKING:` too: they never run, but a module that needs another's types to be
  read depends on it as much as one that imports it, and a cycle hidden there is still a cycle;
- `import a.b.c` runs `a`, `a.b` and `a.b.c`; `from a.b import c` runs `a`, `a.b` and, when `c` is a
  submodule, `a.b.c`. The packages above M itself are left out (Python has already started them before M
  runs), unless M takes a name from one of them (`from rlvr.envs import Env` inside `rlvr.envs.tools` needs
  `rlvr/envs/__init__` to have got that far);
- `importlib.import_module(...)` with a computed name is not read: the lazy exports of `rlvr.rollout` import
  their own package's modules. No module names an upper layer's module that way; the domains reach the
  registry through the `rlvr.domains` entry points (package metadata, not an import of a named module).

The same graph folded onto the subpackages (`rlvr.envs`, `rlvr.rollout`, ...) must be acyclic too, and along
the pipeline (`PIPELINE`) imports point downstream only; the packages of one tier never import each other.
Modules another project wrote, carried unchanged but for their import lines (`VENDORED`), are left out: their
graph is their authors' (Harbor's task models import each other lazily, both ways).
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "rlvr"
VENDORED = ("rlvr.domains.harbor.upstream.",)
"""Packages of other projects' modules (tests/domains/harbor/vendor_harbor.py checks the copy)."""
PIPELINE: tuple[tuple[str, ...], ...] = (
    ("tasks", "sandbox"), ("envs",), ("verify",), ("domains", "scale"), ("rollout",), ("schedule", "store"),
    ("monitor",), ("train",))
"""The layers of DESIGN.md, lowest first: a package may import those of the tiers before its own, never those
after nor the other packages of its own tier (the sandbox knows no task, a domain no cluster). The doors at
the top (`integrations`, `commands`, `cli`) may import anything."""


def module_files(src: Path = SRC) -> dict[str, Path]:
    """Dotted module name -> file, for every module and package under src/rlvr."""
    out: dict[str, Path] = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(not p.isidentifier() for p in parts):
            continue  # data trees shipped with the package (task projects), not importable modules
        if ".".join(parts).startswith(VENDORED):
            continue  # another project's modules, carried as its release has them
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(nodes: list[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements anywhere under `nodes`, the `if TYPE_CHECKING:` branches included."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        else:
            yield from _import_nodes(list(ast.iter_child_nodes(node)))


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports_of(module: str, path: Path, modules: set[str]) -> set[str]:
    """The rlvr modules that running `module` (all of its functions included) imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    own = set(_ancestors(module)) | ({module} if is_package else set())
    out: set[str] = set()

    def run(target: str, *, names_from: bool = False) -> None:
        """`target` runs, with the packages above it; `names_from`: M reads names from target itself."""
        for pkg in _ancestors(target):
            if pkg not in own:
                out.add(pkg)
        if target in modules and (names_from or target not in own):
            out.add(target)

    for node in _import_nodes([tree]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    run(alias.name)
            continue
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        if source.split(".")[0] != ROOT:
            continue
        takes_names = False
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            if sub in modules:
                run(sub)
            else:
                takes_names = True
        run(source, names_from=takes_names)
    out.discard(module)
    return out


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    files = module_files(src)
    names = set(files)
    return {mod: imports_of(mod, path, names) for mod, path in files.items()}


def tangles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan): the sets of modules that import
    each other, directly or through others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle per tangle, each as a closed path."""
    return [_cycle_in(graph, set(comp)) for comp in tangles(graph)]


def describe(graph: dict[str, set[str]]) -> str:
    """Each tangle as one of its cycles and all of its members."""
    return "\n".join(f"{' -> '.join(_cycle_in(graph, set(comp)))}   (tangled: {', '.join(comp)})"
                     for comp in tangles(graph))


def _cycle_in(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest cycle through the first module of a strongly connected component (breadth-first)."""
    start = min(comp)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in component {sorted(comp)}")  # unreachable for a real component


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto the subpackages of rlvr (`rlvr.envs.env` -> `envs`); the top-level
    modules (`rlvr`, `rlvr.errors`, `rlvr.config`, `rlvr.cli`) become nodes of their own name."""
    def fold(mod: str) -> str:
        parts = mod.split(".")
        return parts[1] if len(parts) > 1 else ROOT

    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        out.setdefault(fold(mod), set()).update(t for t in map(fold, targets) if t != fold(mod))
    return out


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 50, "the module walk found too few modules"
    assert not tangles(graph), "import cycles in rlvr:\n" + describe(graph)


def test_no_cycles_between_subpackages() -> None:
    graph = package_graph(import_graph())
    assert not tangles(graph), "subpackages importing each other:\n" + describe(graph)


def pipeline_breaks(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a package of the pipeline to one of a later tier or another package of its own
    tier."""
    rank = {name: i for i, tier in enumerate(PIPELINE) for name in tier}

    def package(mod: str) -> str:
        parts = mod.split(".")
        return parts[1] if len(parts) > 1 else ""

    out = []
    for mod, targets in graph.items():
        src = package(mod)
        if src not in rank:
            continue
        for target in targets:
            dst = package(target)
            if dst in rank and dst != src and rank[dst] >= rank[src]:
                out.append(f"{mod} imports {target}")
    return sorted(out)


def test_pipeline_imports_point_downstream() -> None:
    breaks = pipeline_breaks(import_graph())
    tiers = " < ".join("/".join(tier) for tier in PIPELINE)
    assert not breaks, f"imports running up the pipeline {tiers} or across a tier:\n" + "\n".join(breaks)


def test_graph_reads_lazy_and_package_imports(tmp_path: Path) -> None:
    """The walker itself: lazy and TYPE_CHECKING imports are edges, packages resolve, cycles show; a peer of
    the same tier is a break."""
    pkg = tmp_path / ROOT
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("from rlvr.a.x import X\n")
    (pkg / "a" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rlvr import b\nX = 1\n"
        "def f():\n    from rlvr.b import Y\n")
    (pkg / "b.py").write_text("from rlvr.a import X\nY = 2\n")
    (pkg / "c.py").write_text("from . import b\nimport rlvr.a.x\n")
    graph = import_graph(tmp_path)
    assert graph["rlvr.a.x"] == {"rlvr.b"}  # the TYPE_CHECKING import and the lazy one
    assert graph["rlvr.b"] == {"rlvr.a"}
    assert graph["rlvr.a"] == {"rlvr.a.x"}
    assert graph["rlvr.c"] == {"rlvr.b", "rlvr.a", "rlvr.a.x"}
    assert find_cycles(graph) == [["rlvr.a", "rlvr.a.x", "rlvr.b", "rlvr.a"]]


def test_pipeline_breaks_are_upward_and_across_a_tier() -> None:
    graph = {"rlvr.sandbox.pool": {"rlvr.tasks.spec"},
             "rlvr.envs.env": {"rlvr.tasks.spec", "rlvr.sandbox.pool"},
             "rlvr.verify.base": {"rlvr.domains.code"},
             "rlvr.domains.code": {"rlvr.verify.base", "rlvr.errors"},
             "rlvr.cli": {"rlvr.train.loop"}}
    assert pipeline_breaks(graph) == ["rlvr.sandbox.pool imports rlvr.tasks.spec",
                                      "rlvr.verify.base imports rlvr.domains.code"]


LIBRARY = ("tasks", "sandbox", "envs", "verify", "schedule", "store", "monitor", "rollout", "scale",
           "domains")
"""The layers that take their own config section or plain arguments, never the whole run config: only the run
builder (`rlvr.run`), the trainer and the doors above them see a RunConfig."""
RUN_CONFIG_HOMES = ("rlvr.config", "rlvr.config.run_config")


def run_config_imports(src: Path = SRC) -> list[str]:
    """`module: statement` for each import of RunConfig (or of its module) in the library layers, lazy and
    TYPE_CHECKING ones included."""
    out = []
    for module, path in module_files(src).items():
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in LIBRARY:
            continue
        for node in _import_nodes(list(ast.parse(path.read_text()).body)):
            if isinstance(node, ast.ImportFrom) and node.module in RUN_CONFIG_HOMES and \
                    any(alias.name == "RunConfig" for alias in node.names):
                out.append(f"{module}: from {node.module} import RunConfig")
            elif isinstance(node, ast.ImportFrom) and node.module == "rlvr.config" and \
                    any(alias.name == "run_config" for alias in node.names):
                out.append(f"{module}: from rlvr.config import run_config")
            elif isinstance(node, ast.Import) and any(a.name == "rlvr.config.run_config" for a in node.names):
                out.append(f"{module}: import rlvr.config.run_config")
    return sorted(out)


def test_no_library_layer_sees_the_run_config() -> None:
    found = run_config_imports()
    assert not found, ("library layers importing RunConfig (take the section or plain arguments instead):\n"
                       + "\n".join(found))


def test_the_run_config_rule_catches_each_form(tmp_path: Path) -> None:
    pkg = tmp_path / ROOT
    for sub in ("verify", "train", "config"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "config" / "run_config.py").write_text("class RunConfig: ...\n")
    (pkg / "verify" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                         "    from rlvr.config import RunConfig\n")
    (pkg / "verify" / "b.py").write_text("def f():\n    import rlvr.config.run_config\n")
    (pkg / "verify" / "c.py").write_text("from rlvr.config import SandboxConfig\n")  # a section: fine
    (pkg / "train" / "d.py").write_text("from rlvr.config import RunConfig\n")  # the trainer may
    assert run_config_imports(tmp_path) == ["rlvr.verify.a: from rlvr.config import RunConfig",
                                            "rlvr.verify.b: import rlvr.config.run_config"]
