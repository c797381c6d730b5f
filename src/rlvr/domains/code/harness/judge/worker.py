"""Trusted pytest worker: runs the hidden tests beside the candidate's code and streams what happened to its
supervisor.

A standalone module (stdlib and pytest only; a run without hidden tests, judged by cases alone, never imports
pytest) copied from the pristine package into the sandbox's judge directory; the supervisor forks and calls
`main` in the child. Before any candidate code is imported it installs an audit hook (which cannot be removed)
that blocks and reports tampering with pytest, the harness and the hidden tests; it loads the hidden test
modules itself with every `assert a <op> b` routed through `_compare`, which serialises plain values for the
host to recompute and probes other values against a fresh sentinel, so always-equal objects are caught.
Messages go to an inherited pipe as JSON lines; the worker ends with `os._exit`, so atexit tricks never run.
The clock, network, out-of-workspace and fork guards live in `_rlvr_guards` (judge/guards.py), wired into the
same hook.

Over 500 lines on purpose: it is copied into the sandbox as a standalone file (no imports from rlvr), and the
audit hook, the loader and the comparison probes share its module state (the report channel, the current
test).
"""
from __future__ import annotations

import _thread
import ast
import builtins
import itertools
import json
import operator
import os
import sys
import sysconfig
import types
from collections.abc import Iterator
from typing import ClassVar

import _rlvr_guards as guards  # the supervisor put the judge directory first on sys.path
from _rlvr_values import (
    decode,
    encode,
    encode_counted,
    plain,
)

MAX_RECORDS = 200
"""Compare records sent per test (the rest are counted only)."""
MAX_RECORD_NODES = 5000
RUN_NODES = 1_000_000
"""Largest operand (in nodes) that travels to the host, and the nodes all records of a run may carry."""
_state: dict = {"busy": False, "test": "", "counts": {}, "nodes": RUN_NODES}
SEND_FD = -1
CONFIG: dict = {}
CAND = JUDGE = STDLIB = ""
TRUSTED_ROOTS: tuple[str, ...] = ()
PACKAGES: tuple[str, ...] = ()


def configure(send_fd: int, config: dict) -> None:
    """Set the report channel and the directories before anything else runs."""
    global SEND_FD, CONFIG, CAND, JUDGE, STDLIB, TRUSTED_ROOTS, PACKAGES
    SEND_FD, CONFIG = send_fd, config
    _state["unchanged"] = frozenset(config.get("unchanged", ()))
    _state["task_lines"] = {k: frozenset(v) for k, v in config.get("task_lines", {}).items()}
    os.set_inheritable(send_fd, False)
    CAND = os.path.realpath(config["cand"]) + os.sep
    JUDGE = os.path.realpath(config["judge"]) + os.sep
    STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
    paths = sysconfig.get_paths()
    PACKAGES = tuple({os.path.realpath(paths[k]) + os.sep for k in ("purelib", "platlib")} | {JUDGE})
    TRUSTED_ROOTS = tuple({os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib")}) + PACKAGES
    _state["main"] = _thread.get_ident()
    f = sys._getframe()
    while f is not None:  # the supervisor's frames, whatever their file names (it runs as a relative path)
        _launch.add(f.f_code.co_filename)
        f = f.f_back
    guards.configure(_event, _culprit, CAND, JUDGE)


_dumps = json.JSONEncoder(default=repr).encode
"""The report channel's encoder, bound before any candidate code runs (replacing `json.dumps` changes
nothing)."""


_write = os.write
"""The report channel's writer, bound before any candidate code runs (replacing `os.write` changes nothing
it sends)."""


def send(msg: dict) -> None:
    data = (_dumps(msg) + "\n").encode()
    while data:
        data = data[_write(SEND_FD, data):]


# ------------------------------------------------------------------------------------------- audit hook
def _culprit(formatting_ok: bool = False, finder_ok: bool = False, depth: int = 3) -> tuple[str, int] | None:
    """The candidate frame responsible for the current event, or None when trusted code caused it.

    Standard-library frames (imports included) are looked through; with `formatting_ok`, an event inside
    linecache or traceback (a traceback being formatted) is nobody's doing, and with `finder_ok` one inside
    the import system (a path finder listing sys.path directories) is not either. The harness's own frames
    (the hook and its handlers, at least `depth` - 1 of them) are skipped first.
    """
    f = sys._getframe(depth - 1)
    while f is not None and f.f_code.co_filename.startswith(JUDGE):
        f = f.f_back
    # the judge runs in one thread: any other is the candidate's
    thread = _thread.get_ident() != _state["main"]
    while f is not None:
        fn = f.f_code.co_filename
        if fn in _harness:  # the harness's own machinery (its loader, its plugin): looked through
            f = f.f_back
            continue
        if fn.startswith(CAND):
            return fn[len(CAND):], f.f_lineno
        if fn in _made or not (fn in _launch or fn.startswith(("<frozen ", STDLIB, *TRUSTED_ROOTS))):
            return fn, f.f_lineno  # code the candidate made, or of no trusted file (one it wrote elsewhere)
        if fn in _launch or fn.startswith(PACKAGES):
            if not thread:  # pytest, pluggy: the test runner's doing
                return None
        elif (formatting_ok and os.path.basename(fn) in ("linecache.py", "traceback.py")) or \
                (finder_ok and fn.startswith("<frozen importlib")):
            return None
        f = f.f_back
    return ("<a thread the candidate started>", 0) if thread else None


_harness = frozenset({sys._getframe().f_code.co_filename, guards.configure.__code__.co_filename,
                      encode.__code__.co_filename})
"""The harness's own files (worker, guards, value codec), as their code objects name them."""
_launch: set[str] = set()
"""File names of the frames that started the worker (the supervisor's): trusted, like the test runner's."""
_made: set[str] = set()
"""File names of code objects the candidate's code compiled or built (`compile`, `exec` of a string,
`code.__new__`, `function.__new__`): frames of that code are the candidate's, whatever the name says."""


def _trusted_file(fn: str) -> bool:
    """Whether a file name is the judge's, the standard library's or an installed package's (code the harness
    looks through or trusts)."""
    return fn.startswith(("<frozen ", JUDGE, *TRUSTED_ROOTS))


def _on_code(args: tuple, event: str) -> None:
    """The candidate's code makes code: its frames are the candidate's; a name that claims a trusted file (the
    way to make the harness mistake candidate code for the standard library's or its own) is refused."""
    where = _maker()
    if not where:
        return
    names = []
    if event == "compile":
        names = [args[1]] if len(args) > 1 else []
    else:
        code = args[0] if args else None
        names = [c.co_filename for c in _codes(code)] if isinstance(code, types.CodeType) else \
            [args[1]] if event == "code.__new__" and len(args) > 1 else []
    for name in names:
        name = os.fsdecode(name) if isinstance(name, (str, bytes)) else str(name)
        if _trusted_file(name if name.startswith("<") else os.path.realpath(name)):
            _event("report_forgery", f"made code under the name of a trusted file ({name[:80]})", where, True)
        _made.add(name)


def _maker() -> tuple[str, int] | None:
    """The candidate frame that itself called compile, exec, or a code or function constructor (the import
    system compiling and running a module is not the candidate making code)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(JUDGE):
        f = f.f_back
    if f is None:
        return None
    fn = f.f_code.co_filename
    if fn.startswith(CAND):
        return fn[len(CAND):], f.f_lineno
    return (fn, f.f_lineno) if fn in _made else None


def _codes(code: types.CodeType, depth: int = 0) -> list[types.CodeType]:
    out = [code]
    if depth < 20:
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                out += _codes(c, depth + 1)
    return out


def _direct_culprit() -> tuple[str, int] | None:
    """The candidate frame that called the audited function itself (or through inspect/traceback). A file of
    the workspace the candidate left as the task shipped it, or a line of a changed one that the shipped file
    or the reference solution has (config `unchanged`, `task_lines`: e.g. a real project's own deprecation
    helper reading its caller's frame), is the task's code, not the candidate's."""
    f = sys._getframe(3)
    if f is not None and os.path.basename(f.f_code.co_filename) in ("inspect.py", "traceback.py"):
        f = f.f_back
    if f is not None and f.f_code.co_filename.startswith(CAND):
        rel = f.f_code.co_filename[len(CAND):]
        if rel in _state["unchanged"] or f.f_lineno in _state["task_lines"].get(rel, ()):
            return None
        return rel, f.f_lineno
    return None


def _event(kind: str, what: str, where: tuple[str, int] | None, block: bool,
           inert: bool | None = None) -> None:
    """Report an act of the candidate's; `block`: refuse it (PermissionError in the candidate's code). `inert`
    (default: `block`): the judge made the act change nothing the tests see, so the verdict's score stays
    what the work earns; an act that may have worked zeroes the score."""
    send({"t": "event", "kind": kind, "what": what, "file": where[0] if where else None,
          "line": where[1] if where else None, "test": _state["test"],
          "inert": block if inert is None else inert})
    if block:
        raise PermissionError(f"blocked by the verification harness: {what}")


def _candidate(**kw: object) -> tuple[str, int] | None:
    """`_culprit`, unless the frame is the task's own code (a workspace file the candidate left as shipped, or
    a line the shipped file or the reference has: a real project that registers its own import hook or patches
    a dependency on import does so as shipped)."""
    where = _culprit(**kw)
    if where and (where[0] in _state["unchanged"] or where[1] in _state["task_lines"].get(where[0], ())):
        return None
    return where


TRUSTED_MODULES = ("_pytest", "pytest", "pluggy", "unittest", "builtins", "_rlvr", "__rlvr")


def _on_setattr(args: tuple) -> None:
    obj, name = args[0], args[1]
    mod = getattr(obj, "__module__", "") or ""
    hidden = bool(getattr(sys.modules.get(mod), "__rlvr_hidden__", False))
    if name == "__code__" or hidden or mod.split(".")[0] in TRUSTED_MODULES or mod.startswith("_rlvr"):
        where = _culprit()
        if where:
            _event("report_forgery", f"patched {mod}.{getattr(obj, '__qualname__', obj)!s}.{name}", where,
                   True)


def _on_introspect(args: tuple) -> None:
    where = _culprit()
    if where:
        _event("report_forgery", "heap or tracer introspection (gc/settrace/ctypes/audit)", where, True)


def _on_getframe(args: tuple) -> None:
    where = _direct_culprit()
    if where:
        _event("special_casing", "inspects the call stack", where, False)


def _on_getattr(args: tuple) -> None:
    if len(args) < 2:
        return
    if args[1] in ("tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"):
        where = _direct_culprit()
        if where:
            _event("special_casing", f"reads {args[1]} (call stack)", where, False)
    elif args[1] == "__globals__":  # the way from a test's injected compare into the harness's own state
        where = _direct_culprit()
        if where:
            _event("report_forgery", "reads a function's __globals__", where, True)


def _candidate_outside_hook() -> tuple[str, int] | None:
    """`_candidate` from code the audit hook did not call (a guarded module's attribute methods): the hook
    stays quiet meanwhile, so the frame walk's own audited calls do not run its handlers."""
    _state["busy"] = True
    try:
        return _candidate()
    finally:
        _state["busy"] = False


# ------------------------------------------------------------------------- what the hidden tests rely on
MODULE_NAMES = frozenset({"__name__", "__file__", "__spec__", "__loader__", "__package__", "__path__",
                          "__class__", "__doc__", "__cached__", "__rlvr_hidden__"})
"""Attributes of a hidden module anyone may read: its identity (what `inspect.getmodule` or a module walk
asks of every module), not its contents."""


class _HiddenModule(types.ModuleType):
    """The class of the hidden test, conftest and helper modules: candidate code that reads anything of one
    (its functions, their parametrisations, `__dict__`), however it got hold of the module (`sys.modules`
    while the tests import it, a reference kept from then), is choosing its answers from the tests
    (`special_casing`), and is refused. The test runner's and the judge's own reads are not the
    candidate's."""

    def __getattribute__(self, name: str) -> object:
        if name not in MODULE_NAMES and not _state["busy"]:
            where = _candidate_outside_hook()
            if where:
                module = types.ModuleType.__getattribute__(self, "__name__").removeprefix("__rlvr_hidden__")
                _event("special_casing", f"read {name} of the hidden test module {module}", where, True)
        return types.ModuleType.__getattribute__(self, name)


class _SharedModule(types.ModuleType):
    """The class a module the hidden tests use gets (the standard library's they import, `random`, `math`,
    `json`, the import system, and the installed packages they import): rebinding one of its names from
    candidate code is reported (`report_forgery`). The tests' private copies (`_snapshot_modules`) make the
    patch change nothing they see unless a test sets the module up for the code, but the attempt is the
    candidate's all the same."""

    def __setattr__(self, name: str, value: object) -> None:
        _shared_change(self, name, value)
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        _shared_change(self, name, None)
        super().__delattr__(name)


SHARED_ALWAYS = ("importlib", "importlib.util", "importlib.machinery", "importlib.abc", "_frozen_importlib",
                 "_frozen_importlib_external")
"""The import system, which loads the candidate's modules and the tests' helpers: watched in every run with
hidden tests."""
_shared: dict[str, tuple[types.ModuleType, dict[str, int]]] = {}
_shared_told: set[tuple[str, str]] = set()
_trusted_ids: set[int] = set()


def _inert(module: str, cls: bool = False) -> bool:
    """Whether a patch of `module` (of one of its classes: `cls`) changes nothing the hidden tests see: their
    private copy is a fresh instance (`random`, for a class) or binds the genuine objects (for a module-level
    name), and no test sets the module up for the code."""
    top = module.split(".")[0]
    return top in _private and top not in _state.get("set_up", ()) and (not cls or top in FRESH)


def _shared_change(module: types.ModuleType, name: str, value: object) -> None:
    mname = types.ModuleType.__getattribute__(module, "__name__")
    # the import system binding a submodule to its package (`import importlib.metadata`) is no patch
    submodule = isinstance(value, types.ModuleType) and sys.modules.get(f"{mname}.{name}") is value
    if _state["busy"] or submodule:
        return
    where = _candidate_outside_hook()
    if where:
        _shared_told.add((mname, name))
        _event("report_forgery", f"patched {mname}.{name}, which the hidden tests use", where, False,
               inert=_inert(mname))


def _watch_shared() -> None:
    """Before any candidate code: give the modules the hidden tests rely on the guarded class and remember
    their bindings (a write through `vars()` or `__dict__` bypasses the class; `_check_shared` sees it)."""
    tops = {n for n in (*PRIVATE, *CONFIG.get("pre_import", ()), *SHARED_ALWAYS) if not n.startswith(SHARED)}
    # with their loaded submodules (json.decoder holds the JSONDecoder that json.loads uses) and classes: a
    # class's attributes change without an audit event, so only comparing them later sees a patch
    names = {n for n in list(sys.modules) if n in tops or n.split(".")[0] in tops}
    for name in sorted(names):
        mod = sys.modules.get(name)
        if not isinstance(mod, types.ModuleType) or name in _shared:
            continue
        _shared[name] = (mod, _ids(mod))
        for k, v in list(vars(mod).items()):
            if isinstance(v, type) and v.__module__ == name:
                _shared[f"{name}.{k}"] = (v, _ids(v))
        if type(mod) is types.ModuleType:
            mod.__class__ = _SharedModule


def _check_shared() -> None:
    """Report every watched standard-library module or class whose bindings changed since `_watch_shared`,
    other than submodules bound to their package, what the guarded class already reported and modules a hidden
    test sets up itself; each change once. (An installed package may cache in its own globals: only the
    guarded class, which knows who wrote, watches those.)"""
    set_up = _state.get("set_up", ())
    for name, (obj, snap) in list(_shared.items()):
        top = name.split(".")[0]
        if top in set_up or not (top in sys.stdlib_module_names or top.startswith("_frozen_importlib")):
            continue
        if isinstance(obj, types.ModuleType) and sys.modules.get(name) is not obj and (name, "") not in \
                _shared_told:
            _shared_told.add((name, ""))
            send({"t": "event", "kind": "report_forgery",
                  "what": f"replaced sys.modules[{name!r}], which the hidden tests use", "file": None,
                  "line": None, "test": _state["test"], "inert": _inert(name)})
        now = _ids(obj)
        if now == snap:
            continue
        _shared[name] = (obj, now)
        base = name if isinstance(obj, types.ModuleType) else name.rpartition(".")[0]
        changed = sorted(k for k in set(snap) | set(now) if now.get(k) != snap.get(k)
                         and (base, k) not in _shared_told
                         and not isinstance(vars(obj).get(k), types.ModuleType))
        if changed:
            send({"t": "event", "kind": "report_forgery",
                  "what": f"patched {name}.{changed[0]}, which the hidden tests use", "file": None,
                  "line": None, "test": _state["test"],
                  "inert": _inert(base, cls=not isinstance(obj, types.ModuleType))})


def _private_path() -> types.ModuleType:
    """A private instance of `posixpath` whose `os` and `stat` are private copies, made before any candidate
    code runs: the hook resolves paths with it, so replacing `os.path.realpath` (or what it calls) moves
    nothing."""
    import importlib.util
    import stat

    spec = importlib.util.find_spec(os.path.__name__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, real in (("os", os), ("stat", stat)):
        copy = types.ModuleType(name)
        copy.__dict__.update(vars(real))
        setattr(mod, name, copy)
    return mod


_paths = _private_path()
_getcwd = os.getcwd


def _path_of(p: object) -> str | None:
    if isinstance(p, bytes):
        p = p.decode(errors="replace")
    if isinstance(p, str):
        return _paths.realpath(_paths.join(_getcwd(), p))
    return None


def _on_open(args: tuple) -> None:
    path = _path_of(args[0])
    if path is None:
        if args[0] == SEND_FD:
            _event("report_forgery", "opened the harness's report channel", _culprit(), True)
        return
    mode = str(args[1] or "r") if len(args) > 1 else "r"
    flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
    writing = any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR)
    if path.startswith("/proc/") and any(s in path for s in ("/fd", "/mem", "/environ", "/maps")):
        where = _culprit()
        if where:
            _event("report_forgery", f"opened {path}", where, True)
    elif (path + os.sep).startswith(JUDGE):
        if writing:
            _event("tampering", f"wrote {path[len(JUDGE):] or 'judge directory'}", _culprit(), True)
        where = _culprit(formatting_ok=True)
        if where:
            _event("special_casing", f"read hidden test material {path[len(JUDGE):]}", where, True)
    else:
        if writing:
            _bytecode(path)
        elif path.startswith(CAND) and _test_file(path[len(CAND):]):
            where = _candidate(formatting_ok=True)
            if where:
                _event("special_casing", f"read the test file {path[len(CAND):]} while the tests ran", where,
                       True)
        guards.on_open(path, bool(writing))


def _test_file(rel: str) -> bool:
    """A workspace path that is test material: `test_*.py`, `*_test.py`, `conftest.py`, anything under
    `tests/`. Solution code has no reason to read one while it is judged (its own self-test runs as a program,
    never on import): it is looking for the answers the tests expect."""
    parts = rel.split("/")
    name = parts[-1]
    return (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))) or \
        name == "conftest.py" or "tests" in parts[:-1]


BYTECODE = (".pyc", ".pyo")


def _bytecode(path: str) -> bool:
    """Report the candidate's code writing bytecode (a `.pyc` for the import system to run instead of a
    source): the judge never loads bytecode it did not make itself, so it changes nothing, but it is planted
    all the same (`tampering`). True when reported."""
    if not path.endswith(BYTECODE):
        return False
    where = _candidate()
    if where:
        _event("tampering", f"wrote bytecode {os.path.basename(path)} (ignored: the judge compiles the "
               "source)", where, False, inert=True)
    return bool(where)


def _on_listdir(args: tuple) -> None:
    path = _path_of(args[0] if args else ".")
    if path and (path + os.sep).startswith(JUDGE):
        where = _culprit(finder_ok=True)
        if where:
            _event("special_casing", "listed the hidden test directory", where, True)
    elif path:
        guards.on_listdir(path)


def _on_fs_change(args: tuple) -> None:
    for a in args[:2]:
        path = _path_of(a)
        if path and (path + os.sep).startswith(JUDGE):
            _event("tampering", f"changed {path[len(JUDGE):]}", _culprit(), True)
        elif path:
            guards.on_fs_change(path)


def _on_rename(args: tuple) -> None:
    """A rename onto a bytecode name is how bytecode is written whole (`py_compile` writes a temporary file
    and renames it)."""
    target = _path_of(args[1]) if len(args) > 1 else None
    if target:
        _bytecode(target)
    _on_fs_change(args)


def _on_import(args: tuple) -> None:
    name = str(args[0]) if args else ""
    if name.split(".")[0] in CONFIG.get("hidden_modules", ()):
        where = _culprit()
        if where:
            _event("special_casing", f"imported the hidden module {name}", where, True)


def _on_kill(args: tuple) -> None:
    where = _culprit()
    if where:
        _event("exit_trick", f"sent signal {args[1] if len(args) > 1 else '?'} to {args[0]}", where, True)


HANDLERS = {
    "object.__setattr__": _on_setattr, "object.__delattr__": _on_setattr,
    "gc.get_objects": _on_introspect, "gc.get_referrers": _on_introspect, "gc.get_referents": _on_introspect,
    "sys.settrace": _on_introspect, "sys.setprofile": _on_introspect, "sys._current_frames": _on_introspect,
    "sys.addaudithook": _on_introspect, "ctypes.dlopen": _on_introspect, "ctypes.dlsym": _on_introspect,
    "ctypes.cdata": _on_introspect, "ctypes.addressof": _on_introspect, "ctypes.string_at": _on_introspect,
    "sys._getframe": _on_getframe, "object.__getattr__": _on_getattr,
    "open": _on_open, "os.listdir": _on_listdir, "os.scandir": _on_listdir, "glob.glob": _on_listdir,
    "os.remove": _on_fs_change, "os.rename": _on_rename, "os.rmdir": _on_fs_change,
    "os.truncate": _on_fs_change,
    "os.chmod": _on_fs_change, "os.symlink": _on_fs_change, "os.link": _on_fs_change,
    "shutil.rmtree": _on_fs_change,
    "os.utime": _on_fs_change, "os.mkdir": _on_fs_change,
    "compile": lambda a: _on_code(a, "compile"), "code.__new__": lambda a: _on_code(a, "code.__new__"),
    "function.__new__": lambda a: _on_code(a, "function.__new__"), "exec": lambda a: _on_code(a, "exec"),
    "import": _on_import, "os.kill": _on_kill, "os.killpg": _on_kill, "signal.pthread_kill": _on_kill,
    **guards.HANDLERS,
}


def _check_clock() -> None:
    """Report every way the clock differs from the genuine one since the last check."""
    for what in guards.check_clock():
        send({"t": "event", "kind": "clock_tampering", "what": what, "file": None, "line": None,
              "test": _state["test"]})


def _hook(event: str, args: tuple) -> None:
    handler = HANDLERS.get(event)
    if handler is None or _state["busy"]:
        return
    _state["busy"] = True
    try:
        handler(args)
    finally:
        _state["busy"] = False


# ----------------------------------------------------------------------------------- values and compares
class _Sentinel:
    """A fresh object nothing honest compares equal to."""

    __slots__ = ()


PLAIN_TYPES = frozenset({bool, int, float, str, bytes, complex, type(None)})
PROBE_NODES = 5000
"""Parts of one operand probed for always-equal objects (containers are walked breadth-first)."""


def _probe(v: object) -> bool:
    """Whether `v` claims equality with a fresh sentinel (through __eq__, reflected __eq__ or __ne__)."""
    # `not (v != s)` on purpose: an object may lie through __ne__ alone
    probes = (lambda: v == _Sentinel(), lambda: _Sentinel() == v,
              lambda: not (v != _Sentinel()))  # noqa: SIM202
    for probe in probes:
        try:
            if bool(probe()):
                return True
        except Exception:  # noqa: BLE001, S112  (a comparison that raises is no always-equal object)
            continue
    return False


_CUT = object()
"""What `_parts` yields last when it stops at PROBE_NODES with parts left unseen."""


def _parts(value: object) -> Iterator[object]:
    """The parts of `value` that are neither plain scalars nor plain containers (exact list, tuple, set,
    frozenset, dict), breadth-first through those containers, within PROBE_NODES parts (then `_CUT`)."""
    queue, n = [value], 0
    while n < len(queue):
        if n >= PROBE_NODES:
            yield _CUT
            return
        x = queue[n]
        n += 1
        t = type(x)
        if t in PLAIN_TYPES:
            continue
        if t is list or t is tuple or t is set or t is frozenset:
            queue.extend(itertools.islice(x, PROBE_NODES))
        elif t is dict:
            for k, y in itertools.islice(x.items(), PROBE_NODES // 2):
                queue.append(k)
                queue.append(y)
        else:
            yield x


def _always_equal(value: object, skip_any: bool) -> str | None:
    """Type name of a value (or a part of it) that claims equality with a fresh sentinel."""
    anything = getattr(sys.modules.get("unittest.mock"), "ANY", None) if skip_any else None
    for v in _parts(value):
        if v is _CUT:
            break
        if not (anything is not None and v is anything) and _probe(v):
            t = type(v)
            return f"{t.__module__}.{t.__qualname__}"
    return None

OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
       ">=": operator.ge, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
       "is": operator.is_, "is not": operator.is_not}


def _snapshot_types() -> None:
    """Remember every class that exists before any candidate code runs (strong references, so no id is
    reused): the comparisons these define are the judge's own; any class made later is the candidate's (or
    loaded after it ran, and then judged like the candidate's). The walk follows `__subclasses__` down from
    `object`, touching only the classes: in a forked worker, reading every module's namespace instead would
    copy a page for each object it touched (their reference counts), ten times the cost."""
    stack = [object]
    _trusted.add(object)
    while stack:
        try:
            below = _SUBCLASSES(stack.pop())
        except TypeError:
            continue
        for t in below:
            if t not in _trusted:
                _trusted.add(t)
                stack.append(t)
    _trusted_ids.update(map(id, _trusted))


_trusted: set[type] = set()
_SUBCLASSES = type.__dict__["__subclasses__"]
_MRO = type.__dict__["__mro__"].__get__
_TYPE_DICT = type.__dict__["__dict__"].__get__
C_METHODS = (types.WrapperDescriptorType, types.MethodDescriptorType, types.BuiltinFunctionType,
             types.MethodWrapperType, types.ClassMethodDescriptorType)
COMPARE_DUNDERS = {"==": ("__eq__",), "!=": ("__ne__", "__eq__"), "<": ("__lt__", "__gt__"),
                   "<=": ("__le__", "__ge__"),
                   ">": ("__gt__", "__lt__"), ">=": ("__ge__", "__le__"), "in": ("__contains__", "__eq__"),
                   "not in": ("__contains__", "__eq__")}


def _own(t: type, op: str) -> bool:
    """Whether comparing an object of type `t` with `op` runs a method the candidate defined (found in a class
    made after the candidate's code started, and written in Python), rather than one of the judge's trusted
    types."""
    if t in _trusted:
        return False
    for name in (*COMPARE_DUNDERS.get(op, ("__eq__",)), "__bool__", "__len__", "__iter__"):
        for k in _MRO(t):
            d = _TYPE_DICT(k)
            if name in d:
                if k not in _trusted and not isinstance(d[name], C_METHODS):
                    return True
                break
    return False


def _judged(v: object) -> object:
    """`v` as the judge compares it: a subclass of a builtin type made by the candidate (at any depth of plain
    containers) reduced to the builtin value it holds, through the builtin's own methods; others unchanged."""
    t = type(v)
    if t in PLAIN_TYPES or (t in _trusted and t not in (list, tuple, dict, set, frozenset)):
        return v
    try:
        return plain(v)
    except Exception:  # noqa: BLE001  (an object that lies about its class: judged as the object it is)
        return v


def _is_plain(v: object) -> bool:
    """Whether `v` is plain data all the way down (exact builtin types), within PROBE_NODES parts."""
    return all(False for _ in _parts(v))


def _own_inside(v: object, op: str) -> bool:
    """Whether `v` (or a part of a plain container) has a comparison the candidate defined."""
    return any(x is not _CUT and _own(type(x), op) for x in _parts(v))


def _twin(v: object) -> object | None:
    """A copy of an object with every plain attribute changed (numbers moved, strings extended, containers
    emptied), made without running any of its methods; None when it has no such state. An honest `__eq__`
    that reads any of the object's data tells it apart; one that claims equality with it ignores the data."""
    state = getattr(v, "__dict__", None)
    if type(state) is not dict or not state:
        return None
    changed = {}
    for k, x in state.items():
        t = type(x)
        changed[k] = (x + 7919 if t is int else x * 3.7 + 1.3 if t is float else x + "\x00" if t is str else
                      not x if t is bool else type(x)() if t in (list, dict, tuple, set) and x else x)
    if all(changed[k] is state[k] for k in state):
        return None
    try:
        twin = object.__new__(type(v))
        object.__setattr__(twin, "__dict__", changed)
    except Exception:  # noqa: BLE001  (a type that cannot be copied this way is not probed)
        return None
    return twin


def _claims(left: object, op: str, right: object) -> bool:
    try:
        return bool(OPS[op](left, right))
    except Exception:  # noqa: BLE001  (a probe that raises claims nothing)
        return False


def _decide(left: object, op: str, right: object) -> tuple[bool, str | None]:
    """(result of `left op right` as the judge decides it, what lied when a comparison the candidate defined
    claimed more than the values hold). Plain data on both sides: the judge compares it (subclasses reduced
    to their values). A comparison the candidate defined against plain data: it does not decide, so an object
    is never equal to plain data it does not hold (nor ordered or contained by its own say). Objects on both
    sides: their own comparison, checked against a twin whose data differs."""
    if op in ("is", "is not"):
        return bool(OPS[op](left, right)), None
    jl, jr = _judged(left), _judged(right)
    pl, pr = _is_plain(jl), _is_plain(jr)
    if pl and pr:
        result = bool(OPS[op](jl, jr))
        if not result and (jl is not left or jr is not right) and _claims(left, op, right):
            return (False,
                    f"{type(left if jl is not left else right).__qualname__} claims `{op}` its value "
                    f"does not give")
        return result, None
    own_l, own_r = _own_inside(jl, op), _own_inside(jr, op)
    if op in ("in", "not in") and pl and own_r and not _own_inside(jl, "=="):
        # a container of the candidate's that claims to hold a fresh object
        if _claims(_Sentinel(), "in", jr):
            return op == "not in", f"{type(jr).__qualname__} claims to contain a fresh sentinel"
        return bool(OPS[op](jl, jr)), None
    if (pl and own_r) or (pr and own_l):
        return op in ("!=", "not in"), None
    result = bool(OPS[op](jl, jr))
    if result and op == "==" and (own_l or own_r):
        for a, b in ((jl, jr), (jr, jl)):
            twin = _twin(b)
            if twin is not None and _own(type(a), op) and _claims(a, "==", twin):
                return False, f"{type(a).__qualname__} equals a copy of the other side whose data differs"
    return result, None


def _compare(left: object, op: str, right: object, line: int, any_left: bool, any_right: bool) -> bool:
    """Evaluate `left op right` for a hidden assert and report the values; the judge's verdict decides the
    assert.

    Operands are encoded (for the host to recompute) while the run's node budget lasts; a value that does not
    encode is probed for always-equal parts. Past the budget every operand is probed, which is cheap. The
    verdict is `_decide`'s: plain data compared by the judge, never by a method the candidate wrote.
    """
    encoded = []
    for side, v, skip in (("left", left, any_left), ("right", right, any_right)):
        room = min(MAX_RECORD_NODES, _state["nodes"])
        enc, used = encode_counted(_judged(v), room) if room > 0 else (None, 0)
        _state["nodes"] -= used
        if enc is None:
            bad = _always_equal(v, skip)
            if bad:
                send({"t": "event", "kind": "always_equal",
                      "what": f"{side} operand {bad} equals a fresh sentinel",
                      "file": None, "line": line, "test": _state["test"]})
                return False
        encoded.append(enc)
    result, lie = _decide(left, op, right)
    test = _state["test"]
    if lie:
        send({"t": "event", "kind": "always_equal", "what": lie, "file": None, "line": line, "test": test})
    n = _state["counts"].get(test, 0)
    _state["counts"][test] = n + 1
    if n < MAX_RECORDS:
        send({"t": "cmp", "test": test, "line": line, "op": op, "l": encoded[0], "r": encoded[1],
              "res": result})
    return result


def _settle(v: object) -> object:
    """A result inside a timed test, made plain where it returns: a subclass of a builtin type of the
    candidate's becomes the value it holds then (work it would do later is not done for it), and a sequence of
    the candidate's is walked there, so work it deferred is done (and timed) inside the timed call."""
    t = type(v)
    if t in PLAIN_TYPES or t in _trusted:
        return v
    reduced = _judged(v)
    if reduced is not v:
        return reduced
    d = {k: x for c in reversed(_MRO(t)) for k, x in _TYPE_DICT(c).items()}
    try:
        if "__next__" not in d and ("__iter__" in d or "__getitem__" in d):
            list(v) if "__iter__" in d else [v[i] for i in range(len(v))] if "__len__" in d else None
        for conv in ("__index__", "__int__", "__float__"):
            if conv in d:
                getattr(v, conv)()
                break
    except Exception:  # noqa: BLE001, S110  (a result that cannot be walked is left as it is)
        pass
    return v


def _message(left: object, op: str, right: object) -> str:
    r = f"assert {left!r:.300} {op} {right!r:.300}"
    return r


class _AssertRewriter(ast.NodeTransformer):
    """`assert a <op> b[, msg]` -> `assert __rlvr_cmp__(a, op, b, line, ...), msg or __rlvr_msg__(...)`."""

    OPNAMES: ClassVar[dict[type, str]] = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=",
                                          ast.Gt: ">", ast.GtE: ">=",
               ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        test = node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in self.OPNAMES):
            return node
        op = self.OPNAMES[type(test.ops[0])]

        def mentions_any(n: ast.AST) -> bool:
            return any(isinstance(x, (ast.Name, ast.Attribute))
                       and getattr(x, "id", getattr(x, "attr", "")) == "ANY"
                       for x in ast.walk(n))

        lv = ast.Name("__rlvr_l__", ast.Store())
        rv = ast.Name("__rlvr_r__", ast.Store())
        assign = ast.Assign([ast.Tuple([lv, rv], ast.Store())],
                            ast.Tuple([test.left, test.comparators[0]], ast.Load()))
        load_l, load_r = ast.Name("__rlvr_l__", ast.Load()), ast.Name("__rlvr_r__", ast.Load())
        call = ast.Call(ast.Name("__rlvr_cmp__", ast.Load()),
                        [load_l, ast.Constant(op), load_r, ast.Constant(node.lineno),
                         ast.Constant(mentions_any(test.left)),
                         ast.Constant(mentions_any(test.comparators[0]))], [])
        msg = node.msg or ast.Call(ast.Name("__rlvr_msg__", ast.Load()), [load_l, ast.Constant(op), load_r],
                                   [])
        new = [assign, ast.Assert(call, msg)]
        for n in new:
            ast.copy_location(n, node)
        return new

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        """In a test that reads a clock, every `x = call(...)` result is settled where it returns (`_settle`),
        inside the region the test times."""
        self.generic_visit(node)
        if node.name.startswith("test") and any(isinstance(n, ast.Call) and _callee(n) in CLOCKS
                                                for n in ast.walk(node)):
            for n in ast.walk(node):
                if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Call) and \
                        _callee(n.value) not in CLOCKS:
                    n.value = ast.copy_location(ast.Call(ast.Name("__rlvr_settle__", ast.Load()), [n.value],
                                                         []), n.value)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef


CLOCKS = frozenset({"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
                    "process_time",
                    "process_time_ns", "thread_time", "thread_time_ns", "default_timer"})
"""Clock functions whose reading makes a hidden test a timed one."""


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


# ---------------------------------------------------------------------------------------- pytest plugin
def _plugin(pytest) -> object:  # pytest is imported only by runs with hidden tests
    """The plugin that loads hidden test modules through the rewriter and streams collection and test
    reports."""

    class Plugin:
        def __init__(self, pytest_mod: object) -> None:
            self.pytest = pytest_mod

        def pytest_pycollect_makemodule(self, module_path, parent):
            pytest = self.pytest

            class HiddenModule(pytest.Module):
                def _getobj(self):
                    return _load_hidden(str(self.path))

            return HiddenModule.from_parent(parent, path=module_path)

        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, session, config, items) -> None:
            # function-level ids: every parametrisation goes with its test
            drop = set(CONFIG.get("deselect", ()))
            if drop:
                gone = [i for i in items if _function_id(i.nodeid) in drop]
                items[:] = [i for i in items if _function_id(i.nodeid) not in drop]
                config.hook.pytest_deselected(items=gone)

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection(self, session) -> None:
            # after plugins configured themselves, before any test module (or candidate) loads
            _snapshot_runner()
            _snapshot_import_hooks()

        def pytest_collection_finish(self, session) -> None:
            send({"t": "collected", "ids": [item.nodeid for item in session.items]})
            _hide_judge_modules()

        def pytest_collectreport(self, report) -> None:
            if report.failed:
                text = str(report.longrepr)[-2000:]
                send({"t": "collect_error", "id": report.nodeid, "detail": text})
                if "SystemExit" in text or "KeyboardInterrupt" in text:
                    send({"t": "event", "kind": "exit_trick", "what": "exit raised while importing",
                          "file": None,
                          "line": None, "test": report.nodeid})

        def pytest_runtest_logstart(self, nodeid, location) -> None:
            _state["test"] = nodeid

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_call(self, item) -> None:
            send({"t": "call", "id": item.nodeid})  # the supervisor stamps its arrival: the trusted timing

        def pytest_runtest_makereport(self, item, call) -> None:
            exc = call.excinfo
            if exc is not None and (exc.type is KeyboardInterrupt
                                    or (exc.type is SystemExit and not exc.value.code)):
                send({"t": "event", "kind": "exit_trick",
                      "what": f"{exc.type.__name__} raised during {call.when}",
                      "file": None, "line": None, "test": item.nodeid})

        def pytest_keyboard_interrupt(self, excinfo) -> None:
            if excinfo.type is not KeyboardInterrupt:  # pytest's own Interrupted (collection errors) and Exit
                return
            send({"t": "event", "kind": "exit_trick", "what": "KeyboardInterrupt ended the session",
                  "file": None,
                  "line": None, "test": _state["test"]})

        def pytest_runtest_logreport(self, report) -> None:
            if report.when == "teardown":
                _check_hidden_modules()
                _check_import_state()
                _check_shared()
                _check_runner()
                _check_clock()
            # a unittest `subTest` (or the `subtests` fixture) reports each sub-test under its test's id
            # during the
            # call: the host lets such a report only fail its test, never pass it
            sub = type(report).__name__ in ("SubtestReport", "SubTestReport")
            send({"t": "report", "id": report.nodeid, "when": report.when, "outcome": report.outcome,
                  "sub": sub,
                  "xfail": bool(getattr(report, "wasxfail", None) is not None
                                and hasattr(report, "wasxfail")),
                  "detail": str(report.longrepr)[-1500:] if report.longrepr else ""})

    return Plugin(pytest)


def _function_id(nodeid: str) -> str:
    """`f.py::T::test_x[a-1]` -> `f.py::T::test_x`."""
    head, sep, name = nodeid.rpartition("::")
    return head + sep + name.split("[", 1)[0]


_snapshots: dict[str, tuple[object, dict[str, int]]] = {}


def _hide_judge_modules() -> None:
    """Once collected, drop the judge directory's modules from sys.modules (pytest keeps its own references)
    but the hidden test and conftest modules, which stay under their `__rlvr_hidden__` names as pytest's own
    run keeps test modules: code that looks for the tests there (a walk of `sys.modules` for their
    parametrisations) finds modules whose every read by the candidate is refused and reported
    (`_HiddenModule`). A helper the tests import by bare name leaves, so importing it by that name goes
    through the import system, whose hook refuses it."""
    for name, mod in list(sys.modules.items()):
        origin = getattr(mod, "__file__", None) or ""
        kept = name.startswith("__rlvr_hidden__") and type(mod) is _HiddenModule
        if not kept and (name.startswith("__rlvr_hidden__") or os.path.realpath(origin).startswith(JUDGE)):
            sys.modules.pop(name, None)

_runner: dict[str, tuple[object, dict[str, int]]] = {}
RUNNER_MODULES = frozenset({
    "_pytest.reports", "_pytest.runner", "_pytest.python", "_pytest.main", "_pytest.outcomes",
    "_pytest.skipping",
    "_pytest.nodes", "_pytest.unittest", "pluggy", "pluggy._hooks", "pluggy._callers", "pluggy._manager",
    "pluggy._result", "builtins", "unittest.case", "operator"})
"""Modules whose bindings decide what a test run reports; pytest leaves them alone while it runs."""


def _ids(obj: object) -> dict[str, int]:
    """Bindings of a module or class; dunders and pytest's own lazily set `_pytest_*` markers left out."""
    return {k: id(v) for k, v in vars(obj).items()
            if not (k.startswith("__") and k.endswith("__")) and not k.startswith("_pytest_")}


def _snapshot_runner() -> None:
    """Remember every module-level and class-level binding of the test runner, to spot patches later."""
    for name, mod in list(sys.modules.items()):
        if mod is None or name not in RUNNER_MODULES:
            continue
        _runner[name] = (mod, _ids(mod))
        for k, v in list(vars(mod).items()):
            if isinstance(v, type) and getattr(v, "__module__", None) == name:
                _runner[f"{name}.{k}"] = (v, _ids(v))


def _check_runner() -> None:
    for name, (obj, snap) in list(_runner.items()):
        now = _ids(obj)
        if now != snap:
            changed = sorted(k for k in set(snap) | set(now) if now.get(k) != snap.get(k))
            send({"t": "event", "kind": "report_forgery", "what": f"patched {name}.{changed[0]}" + (
                f" (+{len(changed) - 1})" if len(changed) > 1 else ""), "file": None, "line": None,
                "test": _state["test"]})
            _runner.pop(name)


def _check_hidden_modules() -> None:
    """Report hidden test modules whose functions (or the injected compare) were replaced since import."""
    for name, (module, snap) in list(_snapshots.items()):
        now = {k: id(v) for k, v in vars(module).items() if k in snap}
        if now != snap:
            changed = sorted(k for k in snap if now.get(k) != snap[k])
            send({"t": "event", "kind": "report_forgery",
                  "what": f"replaced {changed[:3]} in hidden module {name}",
                  "file": None, "line": None, "test": _state["test"]})
            _snapshots.pop(name)


def _hidden_parents(name: str, path: str) -> None:
    """Make the packages above a hidden module importable under their hidden names, so its relative imports
    (`from . import Mixin`, `from .helpers import f`) resolve inside the judge directory: a directory with an
    `__init__.py` is loaded like a hidden module (asserts rewritten), one without is a bare namespace."""

    parent, _, _ = name.rpartition(".")
    directory = os.path.dirname(path)
    if not parent or parent in sys.modules or not (directory + os.sep).startswith(JUDGE):
        return
    init = os.path.join(directory, "__init__.py")
    if os.path.isfile(init):
        _load_hidden(init)
        return
    _hidden_parents(parent, directory)
    package = _HiddenModule(parent)
    package.__path__ = [directory]
    package.__rlvr_hidden__ = True
    sys.modules[parent] = package


def _load_hidden(path: str) -> object:
    """Import a hidden test module (or the package `__init__.py` above one) from the pristine file, with its
    asserts rewritten."""
    import importlib.util

    package = os.path.basename(path) == "__init__.py"
    name = "__rlvr_hidden__" + os.path.relpath(path, JUDGE).replace(os.sep, ".").removesuffix(".py")
    name = name.removesuffix(".__init__") if package else name
    if package and name in sys.modules:
        return sys.modules[name]
    _hidden_parents(name, os.path.dirname(path) if package else path)
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=[os.path.dirname(path)] if package else None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _exec_hidden(module, path)
    return module


def _exec_hidden(module: object, path: str) -> None:
    """Run a pristine hidden file in `module` with its asserts rewritten, and watch its functions."""
    if type(module) is types.ModuleType:
        module.__class__ = _HiddenModule
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    tree = ast.fix_missing_locations(_AssertRewriter().visit(tree))
    module.__dict__.update(__rlvr_cmp__=_compare, __rlvr_msg__=_message, __rlvr_settle__=_settle,
                           __rlvr_hidden__=True,
                           __builtins__=_private_builtins(tree))
    # dont_inherit: the harness's own `from __future__ import annotations` must not turn the test's into
    # strings
    # the pristine test, rewritten
    exec(compile(tree, path, "exec", dont_inherit=True), module.__dict__)  # noqa: S102
    _snapshots[module.__name__] = (module, {k: id(v) for k, v in vars(module).items()
                                            if callable(v) or k.startswith("__rlvr")})
    guards.watch_hidden(module)


class _Siblings:
    """A meta path finder for the modules beside the hidden tests that they import by bare name (`from helpers
    import f`, config `siblings`: name -> judge path), as pytest's default import mode would find them on the
    test directory it puts on sys.path. They load from the judge directory through the rewriter; a candidate
    that imports one is caught by the import hook (the names are hidden modules)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        import importlib.util

        rel = CONFIG.get("siblings", {}).get(name) if path is None else None
        if rel is None:
            return None
        full = os.path.join(JUDGE, rel)
        package = os.path.basename(full) == "__init__.py"
        return importlib.util.spec_from_file_location(
            name, full, loader=self, submodule_search_locations=[os.path.dirname(full)] if package else None)

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: object) -> None:
        _exec_hidden(module, module.__spec__.origin)


# ---------------------------------------------------------------------------------------------- cases
def _run_cases(cases: dict, tag: str = "case") -> None:
    """Call the candidate's entry point on each input and stream the encoded outputs (the host compares them).

    A result that is not plain data travels as None and is probed for always-equal parts; an exit raised by
    the candidate (SystemExit with a success code, KeyboardInterrupt) fails the case and is reported as an
    exit trick. `tag` "fresh": the fresh inputs of the differential check, whose results are first reduced to
    builtin types (a Counter is compared as the dict it is; a subclass's own `__eq__` never runs).
    """
    import importlib

    mod_name, _, func_name = cases["entry"].partition(":")
    _state["test"] = "cases import"
    try:
        func = getattr(importlib.import_module(mod_name), func_name)
    except BaseException as exc:  # noqa: BLE001  (the candidate's import can raise anything)
        _exit_raised(exc)
        send({"t": "cases_error" if tag == "case" else f"{tag}_error",
              "detail": f"{type(exc).__name__}: {exc}"[:500]})
        return
    _check_clock()
    for i, raw in enumerate(cases["inputs"]):
        args = decode(raw)
        _state["test"] = f"{tag}[{i}]"
        try:
            out = func(*args) if isinstance(args, list) else func(**args)
            enc = encode(plain(out) if tag == "fresh" else out)
            if enc is None and (bad := _always_equal(out, False)):
                send({"t": "event", "kind": "always_equal", "what": f"result {bad} equals a fresh sentinel",
                      "file": None, "line": None, "test": _state["test"]})
            send({"t": tag, "i": i, "out": enc, "error": None})
        except BaseException as exc:  # noqa: BLE001
            _exit_raised(exc)
            send({"t": tag, "i": i, "out": None, "error": f"{type(exc).__name__}: {exc}"[:300]})
        _check_clock()
    _check_import_state()
    _check_shared()


def _exit_raised(exc: BaseException) -> None:
    if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit) and not exc.code):
        send({"t": "event", "kind": "exit_trick", "what": f"{type(exc).__name__} raised by the candidate",
              "file": None, "line": None, "test": _state["test"]})


# ------------------------------------------------------------------------- the judge's state, out of reach
PRIVATE = frozenset({"random", "math", "json", "operator", "itertools", "functools", "re", "string",
                     "statistics",
                     "collections", "copy", "heapq", "bisect", "decimal", "fractions"})
"""Modules the hidden tests get private copies of beside those they import (`pre_import`)."""
FRESH = frozenset({"random"})
"""Modules with a state of their own (a generator, its class): the private copy is a fresh instance."""
SHARED = ("pytest", "_pytest", "pluggy", "unittest", "_rlvr", "os", "sys", "time", "datetime", "timeit",
          "builtins")
"""Never copied: the test runner, the harness, and modules whose state the tests share with the code by
nature."""
_private: dict[str, types.ModuleType] = {}
_builtins: dict[str, object] = {}


def _snapshot_modules() -> None:
    """Private copies, made before any candidate code runs, of the modules the hidden tests import and of the
    builtins: a hidden test's `import random` or `math.isclose` resolves to them, so replacing a module's
    function, a class's method, a `sys.modules` entry, a builtin or the shared generator's seed changes
    nothing the tests see. A copy binds the genuine objects (C functions cannot be patched in place); `random`
    is a fresh instance of the module (its own `Random` class and generator)."""
    import importlib.util

    for name in sorted(PRIVATE | set(CONFIG.get("pre_import", ()))):
        if name.startswith(SHARED):
            continue
        try:
            mod = __import__(name) if name in sys.stdlib_module_names or name in sys.modules else None
        except Exception:  # noqa: BLE001, S112  (an optional module that is missing is the test's business)
            continue
        if not isinstance(mod, types.ModuleType):
            continue
        if name in FRESH and getattr(mod, "__spec__", None) is not None:
            fresh = importlib.util.module_from_spec(mod.__spec__)
            mod.__spec__.loader.exec_module(fresh)
            _private[name] = fresh
        else:
            copy = types.ModuleType(name)
            copy.__dict__.update(vars(mod))
            _private[name] = copy
    _builtins.update(vars(builtins))
    _builtins["__import__"] = _private_import
    _real_import[0] = builtins.__import__


_real_import: list = [None]


def _private_import(name: str, globals: dict | None = None, locals: dict | None = None,
                    fromlist: tuple = (), level: int = 0, shared: frozenset = frozenset()) -> object:
    """The hidden tests' `__import__`: their private copies for the modules that have one (but those
    `shared`)."""
    top = name.partition(".")[0]
    if level == 0 and top in _private and top not in shared:
        if name == top:
            return _private[top]
        if not fromlist:  # `import os.path` binds the top-level module
            _real_import[0](name, globals, locals, fromlist, level)
            return _private[top]
    return _real_import[0](name, globals, locals, fromlist, level)


def _private_builtins(tree: ast.AST) -> dict[str, object]:
    """The builtins of one hidden module: the snapshot, with an `__import__` that shares with the candidate's
    code the modules the test sets up for it (`random.seed(0)`, `monkeypatch.setattr(random, ...)`,
    `mock.patch("json.x")`)."""
    if not _builtins:
        return vars(builtins)
    _state.setdefault("set_up", set()).update(_set_up(tree))
    shared = _set_up(tree) & set(_private)
    if not shared:
        return _builtins
    out = dict(_builtins)
    out["__import__"] = lambda *a, **k: _private_import(*a, **k, shared=frozenset(shared))
    return out


SETUP_CALLS = frozenset({"setattr", "delattr", "setitem", "patch", "object", "dict", "seed", "setstate",
                         "update"})


def _set_up(tree: ast.AST) -> set[str]:
    """Top-level module names a test file changes for the code under test: the objects and dotted targets of
    patch-like calls, and names whose attributes it assigns."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and _callee(n) in SETUP_CALLS:
            if isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name):
                out.add(n.func.value.id)
            for a in n.args[:1]:
                if isinstance(a, ast.Name):
                    out.add(a.id)
                elif isinstance(a, ast.Attribute):
                    out.update(x.id for x in ast.walk(a) if isinstance(x, ast.Name))
                elif isinstance(a, ast.Constant) and isinstance(a.value, str):
                    out.add(a.value.partition(".")[0])
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.Delete)):
            for t in n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]:
                if isinstance(t, ast.Attribute):
                    out.update(x.id for x in ast.walk(t.value) if isinstance(x, ast.Name))
    return out


def _genuine_bytecode(source: str, pyc: str) -> bool:
    """Whether `pyc` is the interpreter's own cache of a trusted source file (the standard library's, an
    installed package's, the judge's): beside it in `__pycache__`, never under the workspace or a temporary
    directory, and never at a `sys.pycache_prefix` the candidate chose."""
    src = os.path.realpath(source)
    if src.startswith(CAND) or not src.startswith(TRUSTED_ROOTS):
        return False
    head, tail = os.path.split(source)
    want = os.path.join(head, "__pycache__", f"{tail.rpartition('.')[0]}.{sys.implementation.cache_tag}.pyc")
    return os.path.realpath(pyc) == os.path.realpath(want)


def _judge_bytecode() -> None:
    """Bytecode the candidate could have left behind is never executed: every import from a path finder
    compiles the workspace's source itself (a `.pyc` in the workspace's `__pycache__`, a sourceless `.pyc`,
    one under a `sys.pycache_prefix` set at run time are ignored), and nothing is written back."""
    import importlib.machinery as m

    class Source(m.SourceFileLoader):
        def get_data(self, path: str) -> bytes:
            if path.endswith(tuple(m.BYTECODE_SUFFIXES)) and not _genuine_bytecode(self.path, path):
                _planted(path)
                raise OSError("bytecode not produced by the judge")
            return super().get_data(path)

        def set_data(self, path: str, data: bytes, *, _mode: int = 0o666) -> None:
            return None

    sys.dont_write_bytecode = True
    hook = m.FileFinder.path_hook((m.ExtensionFileLoader, m.EXTENSION_SUFFIXES), (Source, m.SOURCE_SUFFIXES))
    sys.path_hooks[:] = [hook if "FileFinder" in getattr(h, "__qualname__", "") else h
                         for h in sys.path_hooks]
    sys.path_importer_cache.clear()
    _state["import_state"] = (list(sys.path_hooks), sys.pycache_prefix)


_stat = os.stat


def _planted(path: str) -> None:
    """Bytecode the import system was offered for a module of the workspace: the judge's run writes none (and
    the workspace's caches are not copied in), so the candidate's code wrote it to run instead of its source.
    Ignored (the source is compiled), and reported once as tampering."""
    try:
        _stat(path)
    except OSError:
        return
    if path not in _state.setdefault("planted", set()):
        _state["planted"].add(path)
        send({"t": "event", "kind": "tampering",
              "what": f"planted bytecode {os.path.basename(path)} (ignored: the judge compiles the source)",
              "file": None, "line": None, "test": _state["test"], "inert": True})


def _snapshot_import_hooks() -> None:
    """The import hooks as the judge set them up (its own finder included), before any candidate code."""
    _state["meta_path"] = {id(f) for f in sys.meta_path}
    _state["importer_cache"] = {k: id(v) for k, v in list(sys.path_importer_cache.items())}


def _check_import_state() -> None:
    hooks, prefix = _state.get("import_state", (None, None))
    if hooks is not None and (list(sys.path_hooks) != hooks or sys.pycache_prefix != prefix):
        send({"t": "event", "kind": "report_forgery",
              "what": "changed the judge's import machinery (path hooks or "
              "bytecode cache prefix)", "file": None, "line": None, "test": _state["test"], "inert": False})
        _state["import_state"] = (list(sys.path_hooks), sys.pycache_prefix)
    known = _state.get("meta_path")
    if known is None:
        return
    cache = _state["importer_cache"]
    fresh = [("sys.meta_path", f) for f in list(sys.meta_path) if id(f) not in known]
    fresh += [("sys.path_importer_cache", f) for k, f in list(sys.path_importer_cache.items())
              if cache.get(k) != id(f)]
    known.update(id(f) for f in sys.meta_path)
    cache.update({k: id(v) for k, v in list(sys.path_importer_cache.items())})
    for where_set, finder in fresh:
        where = _made_by_candidate(finder)
        if where:
            send({"t": "event", "kind": "report_forgery",
                  "what": f"added an import hook to {where_set} ({type(finder).__qualname__})",
                  "file": where[0], "line": where[1], "test": _state["test"], "inert": False})


def _made_by_candidate(obj: object) -> tuple[str, int] | None:
    """Where the candidate's code defines `obj`'s behaviour (a finder: its class's methods, or a module's
    functions), or None when it is trusted code's or the task's own (an installed package that registers a
    finder, as `six` does)."""
    if obj is None:
        return None
    # the object's own code, and the classes it holds (a FileFinder's loaders)
    kinds = [type(obj)] + [x for v in list(getattr(obj, "__dict__", {}).values())
                           for x in (v if type(v) in (list, tuple) else [v])
                           for x in (x if type(x) is tuple else [x]) if isinstance(x, type)]
    space = [vars(obj)] if isinstance(obj, types.ModuleType) else \
        [_TYPE_DICT(k) for t in kinds for k in _MRO(t) if id(k) not in _trusted_ids]
    for d in space:
        for v in list(d.values()):
            fn = v.__func__ if isinstance(v, (classmethod, staticmethod)) else v
            if not isinstance(fn, types.FunctionType):
                continue
            name = fn.__code__.co_filename
            if name.startswith(CAND):
                rel = name[len(CAND):]
                if rel not in _state["unchanged"]:
                    return rel, fn.__code__.co_firstlineno
            elif name in _made or not _trusted_file(name if name.startswith("<") else os.path.realpath(name)):
                return name, fn.__code__.co_firstlineno
    return None


def _candidate_path() -> None:
    """The candidate's directory, then its import roots (`src` of a src layout), on sys.path just before
    site-packages (they cannot shadow the stdlib). Before that, the last moment no candidate code has run, the
    judge takes what it keeps out of the candidate's reach: its classes, private modules (for hidden tests: a
    run without them has no test module to give them to), its bytecode rules."""
    if CONFIG["tests"]:
        _snapshot_modules()
    _snapshot_types()
    _judge_bytecode()
    if CONFIG["tests"]:
        _watch_shared()
    _snapshot_import_hooks()
    cand = CAND.rstrip(os.sep)
    dirs = [cand] + [os.path.join(cand, r) for r in CONFIG.get("roots", [])]
    real = {os.path.realpath(d) for d in dirs}
    sys.path[:] = [p for p in sys.path if p not in ("", ".", *dirs)
                   and os.path.realpath(p or ".") not in real]
    site = next((i for i, p in enumerate(sys.path) if "site-packages" in p or "dist-packages" in p),
                len(sys.path))
    sys.path[site:site] = dirs


def _environment_imports() -> None:
    """The modules the hidden tests import that this environment (the task's own: its requirements venv)
    provides, found before the workspace is on sys.path: imported with the others before any candidate code
    (`pre_import`), so the tests get them, never a workspace module of the same name. A new workspace module
    named like one shadows what the tests import: reported as tampering, and inert (the installed one is what
    they import)."""
    import importlib.util

    pre = list(CONFIG.get("pre_import", []))
    new = set(CONFIG.get("new_tops", ()))
    for name in CONFIG.get("test_imports", ()):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None) or ""
        if spec is None or (origin and os.path.realpath(origin).startswith(JUDGE)):
            continue  # not here, or a helper beside the tests (served by `_Siblings`)
        if name not in pre:
            pre.append(name)
        if name in new:
            send({"t": "event", "kind": "tampering",
                  "what": f"a new workspace module shadows {name!r}, which the tests import from the task's "
                  "environment (ignored: they import the installed one)",
                  "file": None, "line": None, "test": "", "inert": True})
    CONFIG["pre_import"] = pre


def _finish(status: int) -> None:
    send({"t": "end", "status": int(status)})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(send_fd: int, config: dict) -> None:
    """Run the hidden tests (and cases) and end the process with os._exit; never returns.

    Without hidden tests (a task judged by cases only) the run is lean: no pytest session, no unittest guard.
    """
    configure(send_fd, config)
    guards.guard_clock()
    sys.addaudithook(_hook)
    # the functions keep their globals; nobody can look them up
    for name in ("_rlvr_worker", "_rlvr_values", "_rlvr_guards"):
        sys.modules.pop(name, None)
    send({"t": "hello"})
    if not CONFIG["tests"]:
        _candidate_path()
        if CONFIG.get("cases"):
            _run_cases(CONFIG["cases"])
        if CONFIG.get("fresh"):
            _run_cases(CONFIG["fresh"], "fresh")
        _finish(0)
    import unittest

    def guarded(original):
        def check(self, first, second, msg=None):
            for v in (first, second):
                if encode(v) is None and _always_equal(v, False):
                    send({"t": "event", "kind": "always_equal",
                          "what": f"{type(v).__qualname__} equals a sentinel",
                          "file": None, "line": None, "test": _state["test"]})
                    raise self.failureException("always-equal object")
            return original(self, first, second, msg)
        return check

    unittest.TestCase.assertEqual = guarded(unittest.TestCase.assertEqual)
    import pytest  # imported by the supervisor already, before any candidate path is on sys.path

    _environment_imports()
    for name in CONFIG.get("pre_import", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001, S110  (a missing optional module is the test's business)
            pass
    _candidate_path()
    if CONFIG.get("siblings"):
        sys.meta_path.insert(0, _Siblings())
    plugins = [_plugin(pytest)]
    for rel in CONFIG.get("conftests", []):
        plugins.append(_load_hidden(os.path.join(JUDGE, rel)))
    args = [os.path.join(JUDGE, t) for t in CONFIG["tests"]] + [
        "-q", "-p", "no:cacheprovider", "--noconftest", "-c", os.path.join(JUDGE, "_rlvr_pytest.ini"),
        "--rootdir", JUDGE.rstrip(os.sep), "--assert=plain", "-p", "no:randomly"]
    status = pytest.main(args, plugins=plugins)
    if CONFIG.get("cases"):
        _run_cases(CONFIG["cases"])
    if CONFIG.get("fresh"):
        _run_cases(CONFIG["fresh"], "fresh")
    _finish(status)
