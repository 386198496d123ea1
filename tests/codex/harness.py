"""Running the real Codex CLI against the real gateway and recording what went over the wire.

`recording` wraps the gateway's ASGI app: it keeps every POST /v1/responses body and status
Codex sent and got, every Responses event the gateway sent back (SSE or WebSocket), and lets
a test act on a POST before the gateway reads it (`Traffic.on_post`) or on the status it got
(`Traffic.on_status`). `codex_exec` runs `codex exec --json` in a fresh CODEX_HOME.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.core.settings import Settings
from gateway.server.body_writer import EXTENSION as BODY_WRITER
from gateway.ws.frames import EXTENSION as FRAME_WRITER
from tests.support import gateway_server
from tests.support.fake_vllm import FakeVLLM
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids

GENERATE = "/inference/v1/generate"
MODEL = "tiny-qwen3"


@dataclass
class Post:
    headers: dict[str, str]
    body: Any
    status: int | None = None

    @property
    def request_kind(self) -> str | None:
        """What Codex says the request is for: turn | compaction | prewarm."""
        metadata = self.headers.get("x-codex-turn-metadata")
        return json.loads(metadata).get("request_kind") if metadata else None


@dataclass
class Traffic:
    """What the gateway's clients sent and got: connection kinds, POST bodies, Responses events."""

    connections: list[tuple[str, str]] = field(default_factory=list)
    posts: list[Post] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    frames: list[dict] = field(default_factory=list)  # what Codex sent over WebSocket, in order
    app: Any = None  # the gateway's own ASGI app (its runtime is app.state.runtime)
    on_post: Callable[[Any, dict], dict] | None = None  # (gateway app, body) -> the body the gateway gets
    on_status: Callable[[Any, int], None] | None = None  # (gateway app, HTTP status of a POST)

    def responses(self) -> list[dict]:
        """The final Response object of every response the gateway produced, in order."""
        return [e["response"] for e in self.events
                if e.get("type") in ("response.completed", "response.incomplete", "response.failed")]


def record(monkeypatch: pytest.MonkeyPatch) -> Traffic:
    """Every gateway the test starts (tests/support/gateway_server) records into the returned traffic."""
    traffic = Traffic()
    create_app = gateway_server.create_app
    monkeypatch.setattr(gateway_server, "create_app",
                        lambda settings, runtime=None: recording(create_app(settings, runtime), traffic))
    return traffic


@dataclass
class Recorded:
    url: str  # the gateway's
    fake: FakeVLLM
    traffic: Traffic


@contextlib.contextmanager
def recorded_gateway(monkeypatch: pytest.MonkeyPatch, model: Path, *, fake: dict[str, Any] | None = None,
                     **settings: Any) -> Iterator[Recorded]:
    """The gateway on `model`'s tokenizer (`settings` its Settings fields), its traffic recorded, in
    front of a fresh fake vLLM (`fake` its options)."""
    traffic = record(monkeypatch)
    with (FakeVLLM(**(fake or {})) as replica,
          gateway_server.running_gateway(Settings(model=str(model), upstreams=[replica.url], **settings)) as url):
        yield Recorded(url, replica, traffic)


def recording(app, traffic: Traffic):
    """Wrap the gateway's ASGI app to record (and optionally alter) Codex's traffic."""
    traffic.app = app

    async def recorded(scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await app(scope, receive, send)
        traffic.connections.append((scope["type"], scope["path"]))
        if scope["path"] != "/v1/responses":
            return await app(scope, receive, send)
        buffer = bytearray()
        post: Post | None = None
        if scope["type"] == "http" and scope["method"] == "POST":
            post = Post({k.decode(): v.decode() for k, v in scope["headers"]}, None)
            traffic.posts.append(post)
            receive = await _read_body(receive, post, lambda body: traffic.on_post(app, body)
                                       if traffic.on_post else body)

        # Streamed bytes go to the client through the server's direct writers once the headers
        # are out (gateway/server/body_writer.py, gateway/ws/frames.py): record what they write.
        extensions = dict(scope.get("extensions") or {})
        if (writer := extensions.get(BODY_WRITER)) is not None:
            extensions[BODY_WRITER] = _Tapped(writer, buffer.extend)
        if (frames := extensions.get(FRAME_WRITER)) is not None:
            extensions[FRAME_WRITER] = _Tapped(frames, lambda text: traffic.events.append(json.loads(text)))
        scope = {**scope, "extensions": extensions}
        if scope["type"] == "websocket":
            receive = _frames_into(receive, traffic.frames)

        async def tap(message):
            if message["type"] == "http.response.start":
                if post is not None:
                    post.status = message["status"]
                if traffic.on_status is not None:
                    traffic.on_status(app, message["status"])
            elif message["type"] == "http.response.body":
                buffer.extend(message.get("body", b""))
            elif message["type"] == "websocket.send" and message.get("text"):
                traffic.events.append(json.loads(message["text"]))
            await send(message)

        try:
            await app(scope, receive, tap)
        finally:
            for line in bytes(buffer).decode().splitlines():
                if line.startswith("data: "):
                    traffic.events.append(json.loads(line[6:]))

    return recorded


def _frames_into(receive, frames: list[dict]):
    async def received():
        message = await receive()
        if message["type"] == "websocket.receive" and message.get("text"):
            frames.append(json.loads(message["text"]))
        return message
    return received


class _Tapped:
    """A direct writer that records what it writes."""

    def __init__(self, writer: Any, record: Callable[[bytes], object]) -> None:
        self._writer, self._record = writer, record

    def write(self, data: bytes) -> bool:
        written = self._writer.write(data)
        if written:
            self._record(data)
        return written

    @property
    def paused(self) -> bool:
        return self._writer.paused

    async def drain(self) -> None:
        await self._writer.drain()


async def _read_body(receive, post: Post, alter: Callable[[dict], dict]):
    """Read the whole request body, record it (altered), and replay it to the app."""
    chunks = bytearray()
    while True:
        message = await receive()
        chunks.extend(message.get("body", b""))
        if not message.get("more_body"):
            break
    post.body = alter(json.loads(chunks))
    replay = [{"type": "http.request", "body": json.dumps(post.body).encode(), "more_body": False}]

    async def replayed():
        return replay.pop() if replay else await receive()

    return replayed


@dataclass
class Run:
    returncode: int
    events: list[dict]
    stderr: str

    def items(self, kind: str) -> list[dict]:
        return [e["item"] for e in self.events if e["type"] == "item.completed" and e["item"]["type"] == kind]

    def errors(self) -> list[str]:
        return [e["message"] for e in self.events if e["type"] == "error"]


def catalog(path: Path, *, context_window: int = 32768, images: bool = False) -> Path:
    """A `model_catalog_json` entry for the served model. Without one Codex uses fallback
    metadata, which offers no apply_patch tool; 0.169 only knows the freeform (custom) kind.
    `base_instructions` replaces Codex's ~3k-token default prompt with one line."""
    entry = {
        "slug": MODEL, "display_name": MODEL, "description": "served by vllm-gateway", "visibility": "list",
        "supported_in_api": True, "priority": 1, "shell_type": "shell_command", "supported_reasoning_levels": [],
        "apply_patch_tool_type": "freeform", "input_modalities": ["text", "image"] if images else ["text"],
        "context_window": context_window, "support_verbosity": False,
        "truncation_policy": {"mode": "tokens", "limit": 10000}, "experimental_supported_tools": [],
        "base_instructions": "You are a coding agent. Use the tools to change files.",
    }
    path.write_text(json.dumps({"models": [entry]}))
    return path


def codex_exec(codex_bin: Path, url: str, tmp_path: Path, prompt: str, *, websockets: bool = False,
               config: str = "", args: tuple[str, ...] = (), timeout: float = 120,
               api_key: str = "x") -> tuple[Run, Path]:
    """Run `codex exec --json` in a fresh CODEX_HOME pointed at the gateway; return it and its cwd.
    `config` is extra top-level config.toml; `args` extra command-line arguments; `api_key` what
    Codex sends as `Authorization: Bearer` (its provider's `env_key`)."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(
        config + "\n"
        'model_provider = "gw"\n'
        "[model_providers.gw]\n"
        'name = "gateway"\n'
        f'base_url = "{url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "GW_API_KEY"\n'
        + ("supports_websockets = true\n" if websockets else ""))
    # workspace-write: the default read-only sandbox would refuse the scripted file writes.
    command = [str(codex_bin), "exec", "--skip-git-repo-check", "--ephemeral", "--json", "-m", MODEL,
               "-c", "model_provider=gw", "-s", "workspace-write", *args, prompt]
    # Its own session: on a timeout the whole group goes, the node wrapper and the native binary.
    process = subprocess.Popen(command, cwd=work, env={**os.environ, "CODEX_HOME": str(home), "GW_API_KEY": api_key},
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"codex did not finish within {timeout} s:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return Run(process.returncode, events, stderr), work


def spelled(tokenizer, text: str) -> list[int]:
    """`text` one character per token: what a model may generate, never what re-encoding gives,
    so a prompt holding these ids can only have come from the generated tokens themselves."""
    return [token for char in text for token in ids(tokenizer, char)]


def call_ids(tokenizer, name: str, arguments: dict, *, spell: str = "") -> list[int]:
    """A Qwen3 `<tool_call>` turn; the first occurrence of `spell` in it is spelled out."""
    text = "\n" + json.dumps({"name": name, "arguments": arguments}) + "\n"
    head, _, tail = text.partition(spell) if spell else (text, "", "")
    body = ids(tokenizer, head) + (spelled(tokenizer, spell) + ids(tokenizer, tail) if spell else [])
    return [TOOL_CALL, *body, END_TOOL_CALL, IM_END]


def answer_ids(tokenizer, text: str) -> list[int]:
    return ids(tokenizer, text) + [IM_END]
