"""What is practised: the Task record, loaders of the on-disk forms, and the domain registry."""
from rlvr.tasks.loaders import JsonlPack, TaskDirPack, load_task_dir, open_path
from rlvr.tasks.registry import make, names, register
from rlvr.tasks.selection import lookup, parse, resolve
from rlvr.tasks.source import ListSource, TaskSource
from rlvr.tasks.spec import Task, TaskLimits

__all__ = [
    "JsonlPack", "ListSource", "Task", "TaskDirPack", "TaskLimits", "TaskSource", "load_task_dir", "lookup",
    "make", "names", "open_path", "parse", "register", "resolve",
]
