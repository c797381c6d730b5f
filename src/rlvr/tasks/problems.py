"""One-line UserErrors from pydantic's validation errors: the one formatting of every task and settings error
(`rlvr tasks show`, `rlvr tasks validate`, training), naming the file, the field and the fix."""
from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rlvr.errors import UserError


def validation_error(exc: ValidationError, file: str | Path, prefix: str = "", line: int | None = None,
                     model: type[BaseModel] | None = None) -> UserError:
    """Pydantic's first error as the one-line UserError that every loader and `[verifier]` check raises: the
    file, the field (`prefix` + its location, list items as `[i]`), what is wrong and the fix; an unknown key
    answers with the near misses among `model`'s fields at that level ("did you mean"), and is reported first:
    a misspelt key is also a missing one, and the misspelling is what the author needs to see."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".") or "(record)"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
        close = difflib.get_close_matches(str(err["loc"][-1]), _fields_at(model, err["loc"][:-1]), n=3,
                                          cutoff=0.75)
        fix = f"did you mean {', '.join(map(repr, close))}?" if close else "remove it or check its spelling"
    elif err["type"] == "missing":
        fix = "add it"
    elif err["type"] == "value_error":
        msg, fix = str(err.get("ctx", {}).get("error", msg)), None
    else:
        fix = f"got {err.get('input')!r}" if not isinstance(err.get("input"), dict) else None
    return UserError(msg, file=file, field=f"{prefix}{loc}", fix=fix, line=line)


def _fields_at(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model nested at `loc` inside `model` (list items skipped; [] when unknown)."""
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field is not None else None
        if model is None:
            return []
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds: `M`, `M | None`, `list[M]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for a in typing.get_args(annotation) if (m := _model_in(a)) is not None), None)


def unknown_key(data: Any, model: type[BaseModel], aliases: dict[str, tuple[str, ...]] | None = None,
                loc: str = "") -> tuple[str, list[str]] | None:
    """The first key of `data` (a parsed TOML or JSON table) that `model` does not declare, at any depth, as
    (its dotted location, the near misses among the fields at that level); None when every key is known. For
    models that ignore unknown keys themselves (a format's own library): a misspelt key is refused, never
    silently dropped. Tables typed `dict[str, ...]` hold free keys; `aliases` names the extra keys a model
    accepts by its class name (renamed fields its validators still read)."""
    if not isinstance(data, dict):
        return None
    fields = model.model_fields
    try:  # the annotations with their forward references ("list['Config']") resolved
        hints = typing.get_type_hints(model)
    except (NameError, TypeError):
        hints = {}
    for key, value in data.items():
        here = f"{loc}.{key}" if loc else str(key)
        field = fields.get(key)
        if field is None:
            if key in (aliases or {}).get(model.__name__, ()):
                continue
            return here, difflib.get_close_matches(str(key), list(fields), n=3, cutoff=0.75)
        sub = _model_in(hints.get(str(key), field.annotation))
        if sub is None:
            continue
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            found = unknown_key(item, sub, aliases, f"{here}[{i}]" if isinstance(value, list) else here)
            if found is not None:
                return found
    return None
