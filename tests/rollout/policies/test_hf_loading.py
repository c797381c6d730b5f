"""Loading a model for the hf backend: bad input is one line naming the model, the problem and the fix; the
chat template is the tokenizer's, the plain fallback or a file (`policy.chat_template`), and tool schemas go
to a template that takes `tools=`."""
from __future__ import annotations

import json
import shutil

import pytest

from rlvr.envs.messages import Message
from rlvr.envs.tools import TOOLS
from rlvr.errors import UserError
from rlvr.rollout.core.tokens import template_takes_tools
from rlvr.rollout.policies.builtin import CHAT_TEMPLATE
from rlvr.rollout.policies.hf import HFPolicy

CONV = [Message(role="system", content="s"), Message(role="user", content="q"),
        Message(role="assistant", content="<tool_call>{}</tool_call>"),
        Message(role="tool", content="out", tool_call_id="c1", name="read_file")]
TOOLS_TEMPLATE = ("{% if tools %}<|system|>{% for t in tools %}{{ t['function']['name'] }};{% endfor "
                  "%}<|end|>\n{% endif %}"
                  "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|assistant|>{% endif %}")
NO_TOOL_ROLE = ("{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('roles must alternate "
                "user/assistant') }}{% endif %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}")


def one_line(exc: pytest.ExceptionInfo, *parts: str) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and all(p in msg for p in parts), msg
    return msg


def test_a_gguf_file_is_refused_with_the_conversion_command(tmp_path) -> None:
    gguf = tmp_path / "Model.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(UserError) as exc:
        HFPolicy(gguf, device="cpu")
    one_line(exc, str(gguf), "GGUF",
             f"python -m rlvr.rollout.policies.gguf {gguf} {tmp_path / 'Model.Q4_1-hf'}",
             f"hf:{tmp_path / 'Model.Q4_1-hf'}")
    with pytest.raises(UserError) as exc:  # a directory that holds only the .gguf
        HFPolicy(tmp_path, device="cpu")
    one_line(exc, "GGUF", f"python -m rlvr.rollout.policies.gguf {gguf}")


def test_a_path_that_does_not_exist(tmp_path) -> None:
    with pytest.raises(UserError) as exc:
        HFPolicy(tmp_path / "nothing-here", device="cpu")
    one_line(exc, str(tmp_path / "nothing-here"), "cannot load model: no such directory", "ORG/NAME")
    with pytest.raises(UserError) as exc:
        HFPolicy("./models/none", device="cpu")
    one_line(exc, "./models/none", "cannot load model: no such directory")


def test_a_directory_that_is_not_a_causal_lm(tmp_path) -> None:
    from transformers import ViTConfig

    with pytest.raises(UserError) as exc:
        HFPolicy(tmp_path, device="cpu")
    one_line(exc, str(tmp_path), "no config.json", "save_pretrained")
    ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
              architectures=["ViTForImageClassification"]).save_pretrained(tmp_path)
    with pytest.raises(UserError) as exc:
        HFPolicy(tmp_path, device="cpu")
    one_line(exc, str(tmp_path), "not a causal language model (ViTForImageClassification)", "ForCausalLM")


def test_a_model_without_its_tokenizer(tiny_dir, tmp_path) -> None:
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(tiny_dir / name, tmp_path / name)
    with pytest.raises(UserError) as exc:
        HFPolicy(tmp_path, device="cpu")
    one_line(exc, str(tmp_path), "cannot load its tokenizer", "tokenizer.save_pretrained")


def test_a_tokenizer_with_neither_pad_nor_eos(tiny_dir, tmp_path) -> None:
    shutil.copytree(tiny_dir, tmp_path / "m")
    m = tmp_path / "m"
    for name, keys in (("tokenizer_config.json", ("eos_token", "pad_token")),
                       ("config.json", ("eos_token_id", "pad_token_id")),
                       ("generation_config.json", ("eos_token_id", "pad_token_id"))):
        data = json.loads((m / name).read_text())
        for key in keys:
            data[key] = None
        (m / name).write_text(json.dumps(data))
    with pytest.raises(UserError) as exc:
        HFPolicy(m, device="cpu")
    one_line(exc, str(m), "neither an eos nor a pad token", "eos_token")


def test_cli_eval_names_the_model_and_exits_2(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    res = cli(["eval", "--policy", f"hf:{tmp_path / 'm.gguf'}", "--tasks", "code:1"])
    assert (res.code == 2 and res.stderr.count("\n") == 1
            and "python -m rlvr.rollout.policies.gguf" in res.stderr)
    assert not list((tmp_path / "runs" / "eval").glob("*"))  # nothing half-written


def test_chat_template_choices(tiny_dir, tmp_path) -> None:
    own = HFPolicy(tiny_dir, device="cpu")
    assert own.tokenizer.chat_template == CHAT_TEMPLATE and not own.native_tools
    path = tmp_path / "tools.jinja"
    path.write_text(TOOLS_TEMPLATE)
    native = HFPolicy(tiny_dir, device="cpu", chat_template=str(path))
    assert (native.native_tools and template_takes_tools(TOOLS_TEMPLATE)
            and not template_takes_tools(CHAT_TEMPLATE))
    specs = [t.spec() for t in TOOLS.values()]
    assert native.render(CONV,
                         tools=specs).startswith("<|system|>" + "".join(f"{n};" for n in TOOLS) + "<|end|>")
    assert native.render(CONV) == own.render(CONV)  # no tools given: nothing rendered for them
    assert own.render(CONV, tools=specs) == own.render(CONV)  # a template without tools: the Env's text only
    assert HFPolicy(tiny_dir, device="cpu", chat_template="plain").tokenizer.chat_template == CHAT_TEMPLATE
    with pytest.raises(UserError) as exc:
        HFPolicy(tiny_dir, device="cpu", chat_template="chatml")
    one_line(exc, "policy.chat_template", "neither auto, plain nor a file")


def test_a_template_that_cannot_render_a_tool_message(tiny_dir, tmp_path) -> None:
    path = tmp_path / "strict.jinja"
    path.write_text(NO_TOOL_ROLE)
    strict = HFPolicy(tiny_dir, device="cpu", chat_template=str(path))
    assert strict.render(CONV[:3])  # without a tool message it renders
    with pytest.raises(UserError) as exc:
        strict.render(CONV)
    one_line(exc, str(tiny_dir), "cannot render a conversation with tool messages", "roles must alternate",
             'policy.chat_template = "plain"')
