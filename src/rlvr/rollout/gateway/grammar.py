"""What a request's `response_format` and `tool_choice` ask of a turn, as a grammar the backends sample under.

The grammar is Lark in llguidance's syntax, JSON schemas inline (`%json {...}`): the hf backend masks each
token with llguidance itself (`rlvr.rollout.policies.constrain`) and vLLM with its `guidance`
structured-output backend, which is llguidance too. Tool calls are framed in the served model's own call form
(`TurnReader.frame`), their arguments held to each tool's parameter schema.

    response_format json_object        start: %json {"type": "object"}
    response_format json_schema        start: %json SCHEMA
    tool_choice required               start: call (SEP call)*          (one call when parallel calls are off)
    tool_choice {"name": N}            start: call_N
    both, tool_choice auto             start: calls | json              (a call, or the answer in the format)
"""
from __future__ import annotations

import json
from typing import Any

from rlvr.rollout.gateway.convert import ApiError, Call, TurnReader, bad

ANY_OBJECT: dict[str, Any] = {"type": "object"}


def constraint(call: Call, reader: TurnReader, response_param: str = "response_format") -> str | None:
    """The grammar `call` asks its turn to match, or None (free text); an ApiError (400) when it cannot be
    served: a schema llguidance cannot compile, or a forced call in a form no grammar frames."""
    forced = call.tools and call.tool_choice not in ("auto", "none")
    fmt = _json_rule(call.response_format) if call.response_format is not None else None
    if not forced and fmt is None:
        return None
    rules: list[str] = []
    calls = None
    if call.tools and call.tool_choice != "none":
        calls = _call_rules(call, reader, rules, required=bool(forced))
    if forced:
        rules.insert(0, f"start: {calls}")
    elif calls is not None:
        rules.insert(0, f"start: {calls} | answer")
        rules.append(f"answer: {fmt}")
    else:
        rules.insert(0, f"start: {fmt}")
    lark = "\n".join(rules)
    check(lark, response_param if fmt is not None and not forced else "tool_choice")
    return lark


def _json_rule(fmt: dict[str, Any]) -> str:
    schema = fmt.get("schema") if fmt.get("type") == "json_schema" else ANY_OBJECT
    return "%json " + json.dumps(schema if schema is not None else ANY_OBJECT)


def _call_rules(call: Call, reader: TurnReader, rules: list[str], *, required: bool) -> str | None:
    """Add one rule per tool that may be called; the expression of the turn's calls."""
    frame = reader.frame
    if frame is None:
        if not required:
            return None  # a free call form: the answer alone is held to the format, calls stay free text
        raise bad("this model writes tool calls in a form that cannot be constrained by a grammar, so a call "
                  "cannot be forced; send tool_choice auto", "tool_choice")
    before, between, after = frame
    names = [t["function"]["name"] for t in call.tools]
    if isinstance(call.tool_choice, dict):
        names = [call.tool_choice["name"]]
    alts = []
    for i, tool in enumerate(t for t in call.tools if t["function"]["name"] in names):
        schema = tool["function"].get("parameters") or ANY_OBJECT
        rule = f"call_{i}"
        head = _lit(before + tool["function"]["name"] + between)
        rules.append(f"{rule}: {head} %json {json.dumps(schema)} {_lit(after)}".replace(' ""', ""))
        alts.append(rule)
    rules.append("call: " + " | ".join(alts))
    once = isinstance(call.tool_choice, dict) or not call.parallel_calls or reader.separator is None
    return "call" if once else f"call ({_lit(reader.separator or '')} call)*".replace('("" call)', "(call)")


def _lit(text: str) -> str:
    return json.dumps(text)


def check(lark: str, param: str) -> None:
    """Refuse (400, naming `param`) a grammar llguidance cannot compile."""
    try:
        import llguidance
    except ModuleNotFoundError:
        raise ApiError(400, f"'{param}' needs constrained decoding, which needs llguidance: pip install "
                            "'rlvr[train]'", param=param, code="unsupported_parameter") from None
    err = llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(lark))
    if err and not err.startswith("WARNING"):
        raise bad(f"'{param}' cannot be served: its schema does not compile to a grammar ({err.strip()})",
                  param)
