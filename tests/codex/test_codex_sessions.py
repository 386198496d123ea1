"""Longer real Codex CLI (0.171.0) sessions against the real gateway and a scripted vLLM.

apply_patch as Codex's freeform tool, several tool calls in one turn, reasoning echoed back
(from the session cache and, after a cache miss, from its sealed blob alone), automatic
compaction, and the errors Codex acts on (context_length_exceeded, 429, 503, text-only 400).
The prompts the fake vLLM received are checked id for id: everything the model generated
earlier in the session is in the next prompt exactly as generated. Generated ids are often
spelled one character per token (`spelled`), which no re-encoding of the text reproduces.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import httpx
import pytest

from gateway.adapters.responses.input import parse_request
from gateway.formats import load_format
from tests.codex.harness import (
    GENERATE,
    answer_ids,
    call_ids,
    catalog,
    codex_exec,
    recorded_gateway,
    spelled,
)
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.qwen3_tokens import END_THINK, THINK, ids

pytestmark = pytest.mark.codex

SECRET = "codex-sessions"


@pytest.fixture(scope="module")
def chat_format(qwen_tokenizer_dir):
    return load_format(str(qwen_tokenizer_dir))


def start(qwen_tokenizer_dir, monkeypatch, *, max_model_len: int = 32768, **settings_fields):
    """The gateway (recorded) in front of a fresh fake vLLM: a context manager yielding both."""
    return recorded_gateway(monkeypatch, qwen_tokenizer_dir, fake={"max_model_len": max_model_len},
                            served_model_name="tiny-qwen3", reasoning_secret=SECRET, **settings_fields)


@pytest.fixture
def stack(qwen_tokenizer_dir, monkeypatch) -> Iterator:
    with start(qwen_tokenizer_dir, monkeypatch) as running:
        yield running


def prompts(fake: FakeVLLM) -> list[list[int]]:
    """The prompts of the model calls (the fake keeps the pool's probes apart)."""
    return [body["token_ids"] for body in fake.bodies(GENERATE)]


def continues(later: list[int], earlier: list[int], generated: list[int]) -> bool:
    return later[:len(earlier) + len(generated)] == earlier + generated


PATCH = "*** Begin Patch\n*** Add File: notes.txt\n+first line\n+second line\n*** End Patch"
EDIT = "*** Begin Patch\n*** Update File: notes.txt\n@@\n first line\n-second line\n+second line, edited\n*** End Patch"


def test_apply_patch_is_a_freeform_tool_codex_applies(stack, codex_bin, tokenizer, tmp_path):
    """With a catalog entry saying so, Codex offers apply_patch as a custom (freeform) tool; the
    gateway offers it to the model as a function of one string and hands the call back as a
    custom_tool_call, which Codex applies. Two patches (create, then edit), then the answer."""
    add = call_ids(tokenizer, "apply_patch", {"input": PATCH}, spell="first line")
    edit = call_ids(tokenizer, "apply_patch", {"input": EDIT}, spell="edited")
    answer = answer_ids(tokenizer, "Patched notes.txt.")
    stack.fake.queue(Script(add), Script(edit), Script(answer))
    config = f'model_catalog_json = "{catalog(tmp_path / "models.json")}"'
    run, work = codex_exec(codex_bin, stack.url, tmp_path, "Create notes.txt", config=config)

    assert run.returncode == 0, run.stderr
    assert (work / "notes.txt").read_text() == "first line\nsecond line, edited\n"
    assert [m["text"] for m in run.items("agent_message")] == ["Patched notes.txt."]
    changes = run.items("file_change")
    assert [c["status"] for c in changes] == ["completed", "completed"]
    assert [[(ch["path"].rsplit("/", 1)[-1], ch["kind"]) for ch in c["changes"]] for c in changes] == [
        [("notes.txt", "add")], [("notes.txt", "update")]]

    first, second, third = (post.body for post in stack.traffic.posts)
    [tool] = [t for t in first["tools"] if t.get("name") == "apply_patch"]
    assert tool["type"] == "custom" and tool["format"]["type"] == "grammar"
    # Codex echoes the call as a custom_tool_call with the patch, and answers it with its output.
    call, output = second["input"][-2:]
    assert (call["type"], call["name"], call["input"]) == ("custom_tool_call", "apply_patch", PATCH)
    assert output["type"] == "custom_tool_call_output" and output["call_id"] == call["call_id"]
    assert "Success" in output["output"] and "notes.txt" in output["output"]
    assert [item["input"] for item in third["input"] if item["type"] == "custom_tool_call"] == [PATCH, EDIT]

    p1, p2, p3 = prompts(stack.fake)
    assert continues(p2, p1, add) and continues(p3, p2, edit)
    tail = tokenizer.decode(p2[len(p1) + len(add):])
    assert tail == (f"\n<|im_start|>user\n<tool_response>\n{output['output']}\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n")


@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_every_prompt_of_a_session_holds_all_generated_ids(stack, codex_bin, tokenizer, tmp_path, websockets):
    """Two tool calls, then the answer: the third prompt holds both earlier generations exactly."""
    one = call_ids(tokenizer, "exec_command", {"cmd": "echo one > a.txt"}, spell="echo one")
    two = call_ids(tokenizer, "exec_command", {"cmd": "echo two >> a.txt"}, spell="echo two")
    answer = answer_ids(tokenizer, "Wrote a.txt.")
    assert spelled(tokenizer, "echo one") != ids(tokenizer, "echo one")
    stack.fake.queue(Script(one), Script(two), Script(answer))
    run, work = codex_exec(codex_bin, stack.url, tmp_path, "Write a.txt", websockets=websockets)

    assert run.returncode == 0, run.stderr
    assert (work / "a.txt").read_text() == "one\ntwo\n"
    assert [c["exit_code"] for c in run.items("command_execution")] == [0, 0]
    assert [m["text"] for m in run.items("agent_message")] == ["Wrote a.txt."]
    p1, p2, p3 = prompts(stack.fake)
    assert continues(p2, p1, one) and continues(p3, p2, two)
    assert continues(p3, p1, one)  # the first generation, still exact two turns later
    transports = [kind for kind, path in stack.traffic.connections if path == "/v1/responses"]
    assert transports == (["websocket"] if websockets else ["http"] * 3)


THOUGHT = "I should write the file first."


def reasoning_turn(tokenizer, thought: str = THOUGHT, cmd: str = "echo hi > out.txt") -> list[int]:
    return [THINK, *spelled(tokenizer, f"\n{thought}\n"), END_THINK, *ids(tokenizer, "\n\n"),
            *call_ids(tokenizer, "exec_command", {"cmd": cmd}, spell=cmd)]


def run_reasoning_session(stack, codex_bin, tokenizer, tmp_path):
    generated = reasoning_turn(tokenizer)
    stack.fake.queue(Script(generated), Script(answer_ids(tokenizer, "Done.")))
    run, work = codex_exec(codex_bin, stack.url, tmp_path, "Write hi to out.txt")
    assert run.returncode == 0, run.stderr
    assert (work / "out.txt").read_text() == "hi\n"
    assert [m["text"] for m in run.items("agent_message")] == ["Done."]
    sent = stack.traffic.responses()[0]["output"][0]
    assert sent["type"] == "reasoning" and sent["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    # Codex sends the reasoning item back, its encrypted_content as the gateway sealed it.
    [echoed] = [item for item in stack.traffic.posts[1].body["input"] if item["type"] == "reasoning"]
    assert echoed["encrypted_content"] == sent["encrypted_content"]
    return generated, prompts(stack.fake)


def test_reasoning_is_echoed_back_and_continued_on_its_exact_ids(stack, codex_bin, tokenizer, tmp_path):
    generated, (p1, p2) = run_reasoning_session(stack, codex_bin, tokenizer, tmp_path)
    assert continues(p2, p1, generated)  # the spelled thinking included, id for id


def elsewhere(app, body):
    """As if the request reached another gateway sharing the --reasoning-secret: no session
    tokens, and the echoed reasoning stripped of its `content`."""
    app.state.runtime.store.sessions.discard(body["prompt_cache_key"])
    for item in body["input"]:
        if item["type"] == "reasoning":
            item.pop("content", None)
    return body


def test_after_a_session_cache_miss_the_turn_comes_back_exactly_from_its_blob(stack, codex_bin, tokenizer,
                                                                             chat_format, tmp_path):
    """The blob alone restores the reasoning text and the ids of the whole turn (thinking and
    tool call, both spelled one character per token): the prompt after the miss holds them."""
    stack.traffic.on_post = elsewhere
    generated, (p1, p2) = run_reasoning_session(stack, codex_bin, tokenizer, tmp_path)
    assert continues(p2, p1, generated)
    body = stack.traffic.posts[1].body
    assert p2 != chat_format.render(parse_request(body).conversation)  # which re-encodes the turn
    assert stack.traffic.app.state.runtime.store.sessions.stats.hits == 0


def test_every_turn_of_a_session_is_exact_though_no_request_finds_the_cache(stack, codex_bin, tokenizer, tmp_path):
    """Two reasoning turns, then the answer, each request on a gateway with no session tokens:
    every blob-carrying turn of the history is restored, each spliced onto the one before."""
    one = reasoning_turn(tokenizer, "First the file.", "echo one > a.txt")
    two = reasoning_turn(tokenizer, "Then append.", "echo two >> a.txt")
    stack.fake.queue(Script(one), Script(two), Script(answer_ids(tokenizer, "Wrote a.txt.")))
    stack.traffic.on_post = elsewhere
    run, work = codex_exec(codex_bin, stack.url, tmp_path, "Write a.txt")
    assert run.returncode == 0, run.stderr
    assert (work / "a.txt").read_text() == "one\ntwo\n"
    p1, p2, p3 = prompts(stack.fake)
    assert continues(p2, p1, one) and continues(p3, p2, two) and continues(p3, p1, one)


def test_a_tampered_reasoning_blob_is_ignored_with_a_log(stack, codex_bin, tokenizer, tmp_path, caplog):
    def tamper(app, body):
        for item in body["input"]:
            if item["type"] == "reasoning":
                blob = item.pop("encrypted_content")
                item["encrypted_content"] = blob[:20] + ("A" if blob[20] != "A" else "B") + blob[21:]
                item.pop("content", None)
        return body

    stack.traffic.on_post = tamper
    caplog.set_level(logging.WARNING, logger="gateway.adapters.responses.input")
    generated = reasoning_turn(tokenizer)
    stack.fake.queue(Script(generated), Script(answer_ids(tokenizer, "Done.")))
    run, _ = codex_exec(codex_bin, stack.url, tmp_path, "Write hi to out.txt")
    assert run.returncode == 0, run.stderr  # not an error: the turn went on
    assert [m["text"] for m in run.items("agent_message")] == ["Done."]
    assert [post.status for post in stack.traffic.posts] == [200, 200]
    assert any("not a reasoning blob of this gateway" in r.getMessage() for r in caplog.records)
    _, p2 = prompts(stack.fake)
    assert THOUGHT not in tokenizer.decode(p2)  # nothing of the forged blob reached the model


def test_auto_compaction_rewrites_the_history_and_the_session_goes_on(stack, codex_bin, tokenizer, chat_format,
                                                                     tmp_path, caplog):
    """Codex 0.169 compacts locally for a custom provider: an ordinary POST /v1/responses with no
    tools whose last item asks for a summary, then the turn goes on with a rewritten history (the
    summary as a user message). Both differ from the cached session: each is rendered afresh,
    with no stale tokens spliced in."""
    call = call_ids(tokenizer, "exec_command", {"cmd": "echo hi > out.txt"}, spell="echo hi")
    summary = "SUMMARY: wrote hi to out.txt."
    stack.fake.queue(Script(call), Script(answer_ids(tokenizer, summary)), Script(answer_ids(tokenizer, "All done.")))
    caplog.set_level(logging.INFO, logger="gateway.pipeline.turn")
    # Far below Codex's ~8.5k-token prompt: the first response's usage triggers compaction mid-turn.
    run, work = codex_exec(codex_bin, stack.url, tmp_path, "Write hi to out.txt",
                           config="model_auto_compact_token_limit = 2000")

    assert run.returncode == 0, run.stderr
    assert (work / "out.txt").read_text() == "hi\n"
    assert [m["text"] for m in run.items("agent_message")] == ["All done."]
    posts = stack.traffic.posts
    assert [post.request_kind for post in posts] == ["turn", "compaction", "turn"]
    compaction, after = posts[1].body, posts[2].body
    assert compaction["tools"] == [] and compaction["input"][-1]["role"] == "user"
    assert "COMPACTION" in compaction["input"][-1]["content"][0]["text"]
    assert [item["type"] for item in compaction["input"][-3:-1]] == ["function_call", "function_call_output"]
    # After it: no tool call left in the history, the model's summary handed over as user text.
    assert {item["type"] for item in after["input"]} == {"message"}
    assert summary in after["input"][-1]["content"][0]["text"]

    p1, p2, p3 = prompts(stack.fake)
    assert p2 == chat_format.render(parse_request(compaction).conversation)
    assert p3 == chat_format.render(parse_request(after).conversation)
    assert not continues(p3, p1, call)
    rendered_afresh = [r for r in caplog.records if "does not continue its cached tokens" in r.getMessage()]
    assert len(rendered_afresh) == 2


def test_context_length_exceeded_fails_the_turn_without_retries(qwen_tokenizer_dir, monkeypatch, codex_bin, tmp_path):
    with start(qwen_tokenizer_dir, monkeypatch, max_model_len=4096) as stack:
        run, _ = codex_exec(codex_bin, stack.url, tmp_path, "Say hello")
    assert run.returncode == 1
    assert run.events[-1]["type"] == "turn.failed"
    assert "context window" in run.events[-1]["error"]["message"]
    [post] = stack.traffic.posts  # no retry
    assert post.status == 200
    [failed] = stack.traffic.responses()
    assert failed["status"] == "failed" and failed["error"]["code"] == "context_length_exceeded"
    assert prompts(stack.fake) == []  # nothing reached the replica


def test_codex_waits_out_a_429_and_gets_the_freed_slot(qwen_tokenizer_dir, monkeypatch, codex_bin, tokenizer,
                                                       tmp_path):
    """One slot, held by another client: Codex gets a 429 with Retry-After, waits, retries, and
    succeeds once the slot is free."""
    with start(qwen_tokenizer_dir, monkeypatch, max_concurrent_requests=1) as stack:
        stack.fake.queue(Script(ids(tokenizer, "busy"), hang=True), Script(answer_ids(tokenizer, "Hello.")))
        holding, release = threading.Event(), threading.Event()

        def hold():
            body = {"model": "tiny-qwen3", "input": "hold the slot", "stream": True}
            with httpx.stream("POST", stack.url + "/v1/responses", json=body, timeout=60) as response:
                assert response.status_code == 200
                holding.set()
                release.wait(60)

        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(30)
        stack.traffic.on_status = lambda app, status: release.set() if status == 429 else None
        run, _ = codex_exec(codex_bin, stack.url, tmp_path, "Say hello")
        holder.join(10)
    assert run.returncode == 0, run.stderr
    assert [m["text"] for m in run.items("agent_message")] == ["Hello."]
    statuses = [post.status for post in stack.traffic.posts]
    assert statuses[0] == 200 and statuses[1] == 429 and statuses[-1] == 200
    assert any("429" in message for message in run.errors())  # Codex's "Reconnecting... n/5"


def test_codex_retries_a_503_until_a_replica_is_back(qwen_tokenizer_dir, monkeypatch, codex_bin, tokenizer, tmp_path):
    """The one replica refuses the first generation (vLLM's 503: overloaded, or starting): with no
    other replica to try, the gateway answers 503 and Codex retries until the replica takes it. (An
    ejected replica that still answers is not a 503: panic routing serves through it.)"""
    with start(qwen_tokenizer_dir, monkeypatch) as stack:
        stack.fake.queue(Script([], status=503), Script(answer_ids(tokenizer, "Hello.")))
        run, _ = codex_exec(codex_bin, stack.url, tmp_path, "Say hello")
    assert run.returncode == 0, run.stderr
    assert [m["text"] for m in run.items("agent_message")] == ["Hello."]
    statuses = [post.status for post in stack.traffic.posts]
    assert statuses == [503, 200]


def test_an_image_is_a_clear_400_for_a_text_only_model(stack, codex_bin, tmp_path):
    image = tmp_path / "dot.png"
    image.write_bytes(PNG)
    run, _ = codex_exec(codex_bin, stack.url, tmp_path, "What is in the image?", args=("-i", str(image), "--"))
    assert run.returncode == 1
    [post] = stack.traffic.posts  # a 400 is not retried
    assert post.status == 400
    assert "accepts text only" in run.events[-1]["error"]["message"]
    assert prompts(stack.fake) == []


# A 1x1 RGB PNG.
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8"
                    "cfc000000301010018dd8db00000000049454e44ae426082")


def test_remote_compaction_v2_compacts_through_the_gateway(stack, codex_bin, tokenizer, chat_format, tmp_path):
    """With the provider capability `remote_compaction = "v2"` Codex compacts remotely: the history
    with a final `compaction_trigger` item; the gateway's model writes the summary on the exact
    tokens of the session, answered as one `compaction` item, which Codex sends back in place of
    the history it summarized (gateway/adapters/responses/compaction.py)."""
    call = call_ids(tokenizer, "exec_command", {"cmd": "echo hi > out.txt"}, spell="echo hi")
    summary = "SUMMARY: wrote hi to out.txt."
    stack.fake.queue(Script(call), Script(answer_ids(tokenizer, summary)), Script(answer_ids(tokenizer, "All done.")))
    run, work = codex_exec(codex_bin, stack.url, tmp_path, "Write hi to out.txt",
                           config="model_auto_compact_token_limit = 2000",
                           args=("-c", 'model_providers.gw.capabilities.remote_compaction="v2"'))

    assert run.returncode == 0, run.stderr
    assert (work / "out.txt").read_text() == "hi\n"
    assert [m["text"] for m in run.items("agent_message")] == ["All done."]
    posts = stack.traffic.posts
    assert [post.request_kind for post in posts] == ["turn", "compaction", "turn"]
    assert [post.status for post in posts] == [200, 200, 200]
    compaction, after = posts[1].body, posts[2].body
    assert compaction["input"][-1] == {"type": "compaction_trigger"}
    _, compacted, _ = stack.traffic.responses()
    (item,) = compacted["output"]
    assert item["type"] == "compaction"
    assert item in after["input"]  # Codex's compacted history carries the item as it was sent

    p1, p2, p3 = prompts(stack.fake)
    assert continues(p2, p1, call)  # the summary turn continues the model's own tokens
    assert summary in tokenizer.decode(p3)  # the compacted history holds the summary
    assert p3 == chat_format.render(parse_request(after).conversation)  # rendered afresh
