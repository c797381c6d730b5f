"""Model families for the dialect tests: each family's published chat template (tests/assets/chat_templates,
sources in SOURCES.md) around a small byte-level BPE tokenizer trained here, with the family's special tokens
added.

A template is data: what these tests need of a model is how its template renders a conversation, which special
tokens are single tokens, and which ends a turn. The BPE (a few hundred merges over the templates' own text
and some code, JSON and prose) makes tokens that span several characters, so a re-tokenised boundary would
show.
"""
from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).resolve().parent / "assets" / "chat_templates"
FAMILIES: dict[str, dict[str, Any]] = json.loads((ASSETS / "families.json").read_text(encoding="utf-8"))
"""Family -> template file, dialect, special tokens, bos and end tokens (the first is the tokenizer's eos)."""

CORPUS = """def add(a, b):\n    return a + b\n\nimport os\nprint(os.listdir("."))\n
{"name": "run", "arguments": {"command": "ls -la && python -m pytest -q"}}
{"path": "sol.py", "content": "x = 1\\n"} The tests fail. I'll write the fix and run them again.
Let me look at the workspace first. The answer is 42. Submitting.
"""


def template(family: str) -> str:
    return (ASSETS / FAMILIES[family]["template"]).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def _bpe() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=900, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = [CORPUS] * 20 + [(ASSETS / f["template"]).read_text(encoding="utf-8") for f in FAMILIES.values()]
    core.train_from_iterator(texts, trainer)
    return core


def family_tokenizer(family: str) -> Any:
    """A transformers tokenizer with the family's template, special tokens, bos and eos."""
    from transformers import PreTrainedTokenizerFast

    spec = FAMILIES[family]
    specials = list(spec["specials"])
    tok = PreTrainedTokenizerFast(tokenizer_object=copy.deepcopy(_bpe()), bos_token=spec["bos"],
                                  eos_token=spec["eos"][0], pad_token=spec["eos"][0],
                                  additional_special_tokens=specials,
                                  clean_up_tokenization_spaces=False)
    tok.chat_template = template(family)
    tok.model_max_length = 1 << 30
    return tok


def end_ids(tok: Any, family: str) -> frozenset[int]:
    """The ids that end a model turn in this family (its generation config's eos list)."""
    return frozenset(tok.convert_tokens_to_ids(t) for t in FAMILIES[family]["eos"])


def turn_text(tok: Any, family: str, markers: tuple[str, ...], prompt: str, full: str) -> str:
    """The assistant turn that `full` (a render ending with it) adds after `prompt` (the render before it,
    with the generation prompt), as the model would have written it: past the tokens the two share, up to its
    end token (kept where the dialect reads it, as harmony's `<|call|>`)."""
    a = tok.encode(prompt, add_special_tokens=False)
    b = tok.encode(full, add_special_tokens=False)
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    turn = tok.decode(b[n:], skip_special_tokens=False)
    hits = sorted((turn.index(e), e) for e in FAMILIES[family]["eos"] if e in turn)
    if not hits:
        return turn
    at, end = hits[0]
    return turn[:at + len(end)] if end in markers else turn[:at]
