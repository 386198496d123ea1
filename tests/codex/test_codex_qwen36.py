"""The real Codex CLI (0.171.0) on a Qwen3.6-format model: the gateway with Qwen3.6's real vocabulary and
published template (XML tool calls, `qwen3_coder`), a scripted vLLM writing Qwen3.6's native output
(thinking, then `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>…`).

Codex applies a patch through its freeform apply_patch tool and runs a command, over HTTP and over a
WebSocket; every prompt holds everything the model generated earlier exactly (reasoning and calls
spelled one character per token, which no re-encoding reproduces), and Qwen3.6's XML calls reach
Codex as function and custom tool calls with JSON arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.codex.harness import GENERATE, MODEL, catalog, codex_exec, recorded_gateway
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.parse_events import marked_ids
from tests.support.qwen36 import KNOWN_IDS, qwen36_tokenizer_dir

pytestmark = pytest.mark.codex

MARKUP = {token: KNOWN_IDS[token] for token in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>")}
PATCH = "*** Begin Patch\n*** Add File: notes.txt\n+first line\n+second line\n*** End Patch"


@pytest.fixture(scope="module")
def qwen36():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen36_tokenizer_dir())


@pytest.fixture
def stack(monkeypatch) -> Iterator:
    """The gateway (recorded) on the Qwen3.6 tokenizer dir, in front of a fresh fake vLLM."""
    with recorded_gateway(monkeypatch, qwen36_tokenizer_dir(), fake={"max_model_len": 32768}, served_model_name=MODEL,
                          tool_parser="qwen3_coder", reasoning_parser="qwen3", reasoning_secret="codex-qwen36") as r:
        yield r.url, r.fake, r.traffic


def output_ids(tokenizer, text: str, spell: str) -> list[int]:
    """Qwen3.6's output `text` (markup as its added tokens), the first `spell` in it one character per token."""
    head, _, tail = text.partition(spell)
    spelled = [token for char in spell for token in tokenizer._encode_without_added_tokens(char)]
    return [*marked_ids(tokenizer, head, MARKUP), *spelled, *marked_ids(tokenizer, tail, MARKUP)]


def xml_call(thought: str, name: str, parameters: dict[str, str]) -> str:
    """What Qwen3.6 writes after its generation prompt's `<think>\\n`: thinking, then one XML call."""
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters.items())
    return f"{thought}\n</think>\n\n<tool_call>\n<function={name}>\n{body}</function>\n</tool_call><|im_end|>"


def prompts(fake: FakeVLLM) -> list[list[int]]:
    return [body["token_ids"] for body in fake.bodies(GENERATE)]


def continues(later: list[int], earlier: list[int], generated: list[int]) -> bool:
    return later[:len(earlier) + len(generated)] == earlier + generated


@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_patches_and_runs_a_command_on_qwen36_output_exactly(stack, codex_bin, qwen36, tmp_path, websockets):
    url, fake, traffic = stack
    patch = output_ids(qwen36, xml_call("Create the notes first.", "apply_patch", {"input": PATCH}), "first line")
    run_cat = output_ids(qwen36, xml_call("Now check them.", "exec_command", {"cmd": "cat notes.txt > seen.txt"}),
                         "cat notes")
    answer = output_ids(qwen36, "Done, reading it.\n</think>\n\nnotes.txt is written.<|im_end|>", "reading")
    fake.queue(Script(patch), Script(run_cat), Script(answer))
    config = f'model_catalog_json = "{catalog(tmp_path / "models.json")}"'
    run, work = codex_exec(codex_bin, url, tmp_path, "Create notes.txt", config=config, websockets=websockets)

    assert run.returncode == 0, run.stderr
    assert (work / "notes.txt").read_text() == "first line\nsecond line\n"
    assert (work / "seen.txt").read_text() == "first line\nsecond line\n"
    assert [c["status"] for c in run.items("file_change")] == ["completed"]
    assert [c["exit_code"] for c in run.items("command_execution")] == [0]
    assert [m["text"] for m in run.items("agent_message")] == ["notes.txt is written."]

    # What the gateway sent Codex: reasoning, then the XML calls as Responses calls with JSON arguments.
    # (Over a WebSocket Codex first warms up with `generate: false` before any user query: the template
    # would refuse to render that, and the warm-up completes anyway, generating nothing.)
    assert [r["status"] for r in traffic.responses()] == ["completed"] * (4 if websockets else 3)
    first, second, _ = [r for r in traffic.responses() if r["output"]]
    assert [item["type"] for item in first["output"]] == ["reasoning", "custom_tool_call"]
    assert first["output"][0]["content"] == [{"type": "reasoning_text", "text": "Create the notes first."}]
    assert (first["output"][1]["name"], first["output"][1]["input"]) == ("apply_patch", PATCH)
    assert [item["type"] for item in second["output"]] == ["reasoning", "function_call"]
    assert json.loads(second["output"][1]["arguments"]) == {"cmd": "cat notes.txt > seen.txt"}

    p1, p2, p3 = prompts(fake)
    assert continues(p2, p1, patch) and continues(p3, p2, run_cat) and continues(p3, p1, patch)
    assert qwen36.decode(p1).endswith("<|im_start|>assistant\n<think>\n")
    tail = qwen36.decode(p2[len(p1) + len(patch):])
    assert tail.startswith("\n<|im_start|>user\n<tool_response>\n") and tail.endswith(
        "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n")
    transports = [kind for kind, path in traffic.connections if path == "/v1/responses"]
    assert transports == (["websocket"] if websockets else ["http"] * 3)
