"""Side by side with vLLM's own server: one Codex-shaped session, three ways, on one vLLM.

The alternative to the gateway is pointing Codex at vLLM's own `POST /v1/responses`, which
re-renders and re-tokenizes the whole history every turn. This replays the same session
against the same stock vLLM-CPU replica (prefix caching on) three ways:
- `vllm`: straight to vLLM's `/v1/responses`, the full history every turn (Codex over HTTP);
- `gateway_http`: the same bodies through the gateway, under a `prompt_cache_key`;
- `gateway_ws`: through the gateway's WebSocket, each turn `previous_response_id` + the new items.

The session is Codex's real instructions and tools (tests/data/codex), then turns of the
model's reasoning + `exec_command` call, each answered by a few KB of the call's output. The
tiny model's words are random and it never calls a tool, so the model's turns are scripted:
vLLM prefills the real prompt and decodes `max_output_tokens` tokens on every path, and a
local proxy in front of it (bench/versus_script.py) streams the gateway the script's tokens
in their place, so the gateway gets the turn Codex's model would have generated and the
client echoes it back as Codex does (on the WebSocket the previous response holds it); to
vLLM's own server the client sends the same scripted items as history. Every request takes
the same proxy hop. Each session starts with its own tag after Codex's instructions, so
vLLM's prefix cache shares the instructions and tools between sessions (as it would between
Codex sessions) but never a session's own turns.

Per turn: time to first token and to the end at the client, the prompt's length, and what
happened inside: vLLM's own time to first token (`/metrics`; its clock starts when its
server starts rendering the request, so on the direct path it includes vLLM's rendering
and tokenizing, on the gateway's only its token-in handling), the rest of the client's
time to first token (`outside_vllm_ms`: HTTP, body parsing, and on the gateway's paths all
of the gateway's work), and for the direct path vLLM's `/v1/responses/render` of the same
body, timed on its own after the turn. The three paths take turns (rotating
order) so a loaded machine slows them alike; sessions repeat with new tags.

Exactness (is what the model generated what later prompts contain) is bench/versus_exact.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from bench import procs, versus_exact
from bench.prepare import CODEX_REQUEST, source_text
from bench.spread import spread

PATHS = {"vllm": "vLLM /v1/responses (HTTP, full history)",
         "gateway_http": "gateway, HTTP (full history)",
         "gateway_ws": "gateway, WebSocket (previous_response_id)"}
_END_EVENTS = {"response.completed", "response.incomplete", "response.failed", "error"}
_TYPE = re.compile(r'\{"type":"([^"]+)"')  # a WebSocket event's type: the gateway writes it first
_VLLM_METRICS = ("vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count",
                 "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
PNG_NAME = "benchmarks-versus.png"
log = logging.getLogger("bench.versus")


@dataclass(frozen=True)
class Size:
    """A session's shape: `turns` rounds of a `tool_chars` tool output; `repeats` sessions per path."""

    turns: int
    tool_chars: int
    repeats: int
    max_output_tokens: int = 16  # what vLLM decodes each turn, on every path
    exact_turns: int = 10  # of each exactness rollout (bench/versus_exact.py)
    budget_s: float = 1_200.0  # no new session per path past this (a loaded machine): at least one

    @classmethod
    def parse(cls, text: str) -> Size:
        """"TURNS,TOOL_CHARS,REPEATS[,BUDGET_S]", e.g. "32,6500,3" (FULL) or "64,6500,5,3600"."""
        turns, chars, repeats, *budget = (float(part) for part in text.split(","))
        return cls(int(turns), int(chars), int(repeats), budget_s=budget[0] if budget else cls.budget_s)


FULL = Size(turns=32, tool_chars=8_500, repeats=3)  # ≈ 66k tokens of history at the last turn
QUICK = Size(turns=4, tool_chars=1_500, repeats=1, exact_turns=4)


# -- the session ---------------------------------------------------------------------------

def _codex_base(tag: str) -> dict[str, Any]:
    """Codex's request (its function tools: vLLM's Responses API takes no namespace or web_search
    tools) with the session's tag as a user message right after the instructions."""
    body = json.loads(CODEX_REQUEST.read_text())["body"]
    opening = body["input"][:4]
    tagged = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Session {tag}."}]}
    return {"tools": [tool for tool in body["tools"] if tool.get("type") == "function"], "tool_choice": "auto",
            "opening": [*opening[:2], tagged, *opening[2:]]}


@dataclass(frozen=True)
class _Round:
    """One scripted turn: the model's reasoning and `exec_command` call, then the call's output."""

    index: int
    thought: str
    arguments: str
    output: str

    @classmethod
    def make(cls, index: int, text: str, chars: int) -> _Round:
        start = (index * 2_953) % (len(text) - chars)
        return cls(index, f"Step {index}: read the next part of the module to see how it handles its arguments.",
                   json.dumps({"cmd": f"sed -n {start},{start + 120}p src/module_{index % 7}.py"}),
                   f"Chunk ID: {index:06x}\nWall time: 0.0102 seconds\nProcess exited with code 0\nOutput:\n"
                   + text[start:start + chars])

    def items(self) -> list[dict[str, Any]]:
        """The model's turn as a client echoes it (to vLLM, which generated something else)."""
        return [{"type": "reasoning", "id": f"rs_{self.index:06d}", "summary": [],
                 "content": [{"type": "reasoning_text", "text": self.thought}]},
                {"type": "function_call", "id": f"fc_{self.index:06d}", "call_id": f"call_{self.index:06d}",
                 "name": "exec_command", "arguments": self.arguments}]

    def token_ids(self, tokenizer: Any) -> list[int]:
        """The turn as Qwen3 generates it, for bench.versus_script to stream to the gateway."""
        call = json.dumps({"name": "exec_command", "arguments": json.loads(self.arguments)})
        text = f"<think>\n{self.thought}\n</think>\n\n<tool_call>\n{call}\n</tool_call><|im_end|>"
        return tokenizer.encode(text, add_special_tokens=False)


def _output_item(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _echo(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Output items as a client sends them back as input: without the fields that are null."""
    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    return [clean(item) for item in items]


def _call_id(items: list[dict[str, Any]]) -> str:
    calls = [item["call_id"] for item in items if item.get("type") == "function_call"]
    if not calls:
        raise RuntimeError(f"the model's turn has no function call: {json.dumps(items)[:1000]}")
    return calls[-1]


# -- the three clients ---------------------------------------------------------------------

class _HttpSession:
    """Codex over HTTP: the whole history every turn, streamed. `scripted`: the model's turn
    in the history is the round's script (vLLM generated random words), else what the
    response says (the gateway parsed the script bench.versus_script streamed it)."""

    def __init__(self, client: httpx.Client, url: str, model: str, base: dict[str, Any], size: Size,
                 cache_key: str, *, scripted: bool) -> None:
        self.client, self.url, self.scripted = client, url, scripted
        self.history: list[dict[str, Any]] = list(base["opening"])
        limit = size.max_output_tokens if scripted else 4 * size.max_output_tokens + 1024  # the proxy cuts it
        self.fields = {"model": model, "tools": base["tools"], "tool_choice": base["tool_choice"], "stream": True,
                       "store": False, "max_output_tokens": limit, "prompt_cache_key": cache_key}
        self.call_id: str | None = None
        self.sent: dict[str, Any] = {}  # the last request's body

    def body(self) -> dict[str, Any]:
        return {**self.fields, "input": list(self.history)}

    def turn(self, round_: _Round, previous: _Round | None) -> dict[str, Any]:
        if previous is not None:
            self.history.append(_output_item(self.call_id or "", previous.output))
        started = time.perf_counter()
        first = None
        final: dict[str, Any] | None = None
        self.sent = self.body()
        with self.client.stream("POST", self.url + "/v1/responses", json=self.sent) as response:
            response.raise_for_status()
            kind = ""
            for line in response.iter_lines():  # "event: <type>", then "data: <json>"
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif first is None and kind.endswith(".delta"):
                    first = time.perf_counter()
                elif kind in _END_EVENTS and line.startswith("data:"):
                    final = json.loads(line[5:])
        ended = time.perf_counter()
        response_body = _finished(final)
        model_turn = round_.items() if self.scripted else _echo(response_body["output"])
        self.call_id = _call_id(model_turn)
        self.history += model_turn
        return _timed(started, first, ended, response_body)


class _WebSocketSession:
    """Codex over the gateway's WebSocket: `previous_response_id` and only the new items."""

    def __init__(self, url: str, model: str, base: dict[str, Any], size: Size) -> None:
        self.socket = connect(url.replace("http://", "ws://") + "/v1/responses", max_size=None, open_timeout=60)
        self.opening = list(base["opening"])
        self.fields = {"type": "response.create", "model": model, "tools": base["tools"],
                       "tool_choice": base["tool_choice"], "store": False,
                       "max_output_tokens": 4 * size.max_output_tokens + 1024}
        self.previous: str | None = None
        self.call_id: str | None = None

    def turn(self, round_: _Round, previous: _Round | None) -> dict[str, Any]:
        frame = dict(self.fields)
        if self.previous is None or previous is None:
            frame["input"] = self.opening
        else:
            frame.update(previous_response_id=self.previous, input=[_output_item(self.call_id or "", previous.output)])
        started = time.perf_counter()
        first = None
        self.socket.send(json.dumps(frame))
        while True:
            message = self.socket.recv()
            kind = _event_type(message)
            if first is None and kind and kind.endswith(".delta"):
                first = time.perf_counter()
            elif kind in _END_EVENTS:
                break
        ended = time.perf_counter()
        response_body = _finished(json.loads(message))
        self.previous = response_body["id"]
        self.call_id = _call_id(response_body["output"])
        return _timed(started, first, ended, response_body)

    def close(self) -> None:
        self.socket.close()


def _event_type(data: str | bytes) -> str | None:
    match = _TYPE.match(data if isinstance(data, str) else data.decode())
    return match.group(1) if match else None


def _finished(event: dict[str, Any] | None) -> dict[str, Any]:
    if event is None or "response" not in event or event["response"].get("status") == "failed":
        raise RuntimeError(f"the turn did not finish: {json.dumps(event)[:2000]}")
    return event["response"]


def _timed(started: float, first: float | None, ended: float, response: dict[str, Any]) -> dict[str, Any]:
    usage = response.get("usage") or {}
    return {"history_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
            "cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens"),
            "ttft_ms": round(((first or ended) - started) * 1000, 3), "total_ms": round((ended - started) * 1000, 3)}


def _metric_sums(client: httpx.Client, url: str, names: tuple[str, ...]) -> dict[str, float]:
    """Prometheus samples summed over their labels (one replica, one request at a time)."""
    sums = dict.fromkeys(names, 0.0)
    for line in client.get(url + "/metrics").text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


def _render_ms(client: httpx.Client, url: str, body: dict[str, Any]) -> float:
    """vLLM's own preparation of this turn: `/v1/responses/render` of the same request."""
    started = time.perf_counter()
    client.post(url + "/v1/responses/render", json={**body, "stream": False}).raise_for_status()
    return round((time.perf_counter() - started) * 1000, 3)


# -- the run -------------------------------------------------------------------------------

@dataclass
class _Stack:
    """What a session talks to: vLLM itself, and the gateway in front of it (through the script proxy)."""

    client: httpx.Client
    vllm_url: str
    gateway_url: str
    proxy_url: str
    model: str
    tokenizer: Any


def _session_rows(stack: _Stack, size: Size, repeat: int) -> list[dict[str, Any]]:
    text = source_text()
    rounds = [_Round.make(i, text, size.tool_chars) for i in range(size.turns)]
    tag = f"{time.time_ns():x}-{repeat}"
    client, vllm_url = stack.client, stack.vllm_url
    vllm = _HttpSession(client, stack.proxy_url, stack.model, _codex_base(f"{tag}-vllm"), size, f"vllm-{tag}",
                        scripted=True)
    sessions = {"vllm": vllm,
                "gateway_http": _HttpSession(client, stack.gateway_url, stack.model, _codex_base(f"{tag}-http"), size,
                                             f"http-{tag}", scripted=False),
                "gateway_ws": _WebSocketSession(stack.gateway_url, stack.model, _codex_base(f"{tag}-ws"), size)}
    rows = []
    after = _metric_sums(client, vllm_url, _VLLM_METRICS)
    try:
        for index, round_ in enumerate(rounds):
            previous = rounds[index - 1] if index else None
            client.post(stack.proxy_url + "/script", json={"ids": round_.token_ids(stack.tokenizer)})
            shift = (index + repeat) % len(PATHS)
            for path in [*list(PATHS)[shift:], *list(PATHS)[:shift]]:
                before = after  # nothing else asks vLLM to generate in between
                row = sessions[path].turn(round_, previous)
                after = _metric_sums(client, vllm_url, _VLLM_METRICS)
                engine = after["vllm:time_to_first_token_seconds_sum"] - before["vllm:time_to_first_token_seconds_sum"]
                row.update(path=path, repeat=repeat, turn=index, vllm_ttft_ms=round(engine * 1000, 3),
                           outside_vllm_ms=round(row["ttft_ms"] - engine * 1000, 3),
                           prefix_cache_hit=_ratio(after, before))
                if path == "vllm":
                    row["render_ms"] = _render_ms(client, vllm_url, vllm.sent)
                rows.append(row)
    finally:
        sessions["gateway_ws"].close()
    log.info("versus: session %d done, %d turns up to %s tokens", repeat, size.turns, rows[-1]["history_tokens"])
    return rows


def _ratio(after: dict[str, float], before: dict[str, float]) -> float | None:
    queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    return round(hits / queries, 4) if queries else None


def run(*, quick: bool, vllm_url: str | None, size: Size | None = None) -> dict[str, Any] | None:
    """Rows per (repeat, path, turn), their summary, and the exactness counts; None without vLLM."""
    if vllm_url is None:
        return None
    from transformers import AutoTokenizer

    from gateway.ops.tiny_models import qwen_model_dir

    size = size or (QUICK if quick else FULL)
    model_dir = str(qwen_model_dir())
    with httpx.Client(timeout=600) as client, procs.script_proxy(vllm_url) as proxy, \
            procs.gateway(proxy.url, model_dir, "hf") as gateway:
        model = client.get(vllm_url + "/v1/models").json()["data"][0]["id"]
        stack = _Stack(client, vllm_url, gateway.url, proxy.url, model, AutoTokenizer.from_pretrained(model_dir))
        _session_rows(stack, Size(2, 500, 1, size.max_output_tokens), -1)  # warm-up: connections, caches
        rows: list[dict[str, Any]] = []
        started = time.monotonic()
        for repeat in range(size.repeats):
            rows += _session_rows(stack, size, repeat)
            spent = time.monotonic() - started
            if spent * (repeat + 2) / (repeat + 1) > size.budget_s:  # another one would overrun
                break
        size = dataclasses.replace(size, repeats=repeat + 1)
        log.info("versus: %d sessions per path of %d turns in %.0f s", size.repeats, size.turns, spent)
        client.post(proxy.url + "/script", json={"ids": []})  # the model speaks for itself from here
        exact = versus_exact.run(client, proxy.url, gateway.url, model, turns=size.exact_turns,
                                 tokenizer=stack.tokenizer)
    return {"size": dataclasses.asdict(size), "rows": rows, "summary": summarize(rows), "exactness": exact}


# -- the summary, the table and the plot ---------------------------------------------------

def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per path: the session's summed TTFT and total (median, min, max over repeats); per turn,
    medians over repeats; and the gateway's saving per turn near 16k and 64k tokens of history."""
    by_path: dict[str, Any] = {}
    sums_by_path: dict[str, list[float]] = {}
    for path in PATHS:
        mine = [r for r in rows if r["path"] == path]
        repeats = sorted({r["repeat"] for r in mine})
        sums = {metric: [sum(r[metric] for r in mine if r["repeat"] == k) for k in repeats]
                for metric in ("ttft_ms", "total_ms", "outside_vllm_ms", "vllm_ttft_ms")}
        turns = []
        for turn in sorted({r["turn"] for r in mine}):
            at = [r for r in mine if r["turn"] == turn]
            turns.append({"turn": turn, "history_tokens": round(statistics.median(r["history_tokens"] for r in at)),
                          **{metric: spread([r[metric] for r in at])
                             for metric in ("ttft_ms", "total_ms", "outside_vllm_ms", "vllm_ttft_ms")},
                          **({"render_ms": spread([r["render_ms"] for r in at])} if path == "vllm" else {})})
        by_path[path] = {"session": {metric: spread(values) for metric, values in sums.items()}, "turns": turns}
        sums_by_path[path] = sums["ttft_ms"]
    for path in ("gateway_http", "gateway_ws"):  # per session: the paths took turns, so compare within one
        pairs = list(zip(sums_by_path["vllm"], sums_by_path[path], strict=True))
        by_path[path]["session_saving_ms"] = spread([vllm - own for vllm, own in pairs])
        by_path[path]["session_saving_percent"] = spread([100 * (vllm - own) / vllm for vllm, own in pairs])
    return {"paths": by_path, "saving": {f"{k // 1000}k": _saving(by_path, k) for k in (16_000, 64_000)}}


def _saving(by_path: dict[str, Any], tokens: int) -> dict[str, Any] | None:
    """vLLM's TTFT minus the gateway's at the turn whose history is nearest `tokens` (None when
    the longest history is under 90% of it: a quick run)."""
    turns = by_path["vllm"]["turns"]
    nearest = min(turns, key=lambda t: abs(t["history_tokens"] - tokens))
    if nearest["history_tokens"] < 0.9 * tokens:
        return None
    index = turns.index(nearest)
    reference = nearest["ttft_ms"]["median"]
    saving = {"turn": nearest["turn"], "history_tokens": nearest["history_tokens"], "vllm_ttft_ms": reference}
    for path in ("gateway_http", "gateway_ws"):
        own = by_path[path]["turns"][index]["ttft_ms"]["median"]
        saving[f"{path}_ttft_ms"] = own
        saving[f"{path}_saving_ms"] = round(reference - own, 3)
    return saving


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, 4.5), dpi=120)
    for name, label in PATHS.items():
        turns = data["summary"]["paths"][name]["turns"]
        xs = [t["history_tokens"] / 1000 for t in turns]
        axes.plot(xs, [t["ttft_ms"]["median"] for t in turns], marker="o", markersize=3, label=label)
        axes.fill_between(xs, [t["ttft_ms"]["min"] for t in turns], [t["ttft_ms"]["max"] for t in turns], alpha=0.2)
    axes.set_xlabel("history (thousand tokens)")
    axes.set_ylabel("time to first token (ms; line: median, band: min–max)")
    axes.set_title("One Codex-shaped session on one vLLM-CPU: TTFT per turn")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    pyplot.close(figure)


# -- the top section of docs/benchmarks.md -------------------------------------------------

BEGIN = "<!-- bench:versus begin (generated by `python -m bench --only versus`; edit outside these markers) -->"
END = "<!-- bench:versus end -->"


def update_doc(doc: Path, results: dict[str, Any]) -> None:
    """Rewrite the section between BEGIN and END (put right under the title the first time)."""
    section = results["sections"].get("versus")
    if not section or not section.get("data"):
        return
    text = doc.read_text()
    body = f"{BEGIN}\n\n{render(section, results['machine'])}\n{END}"
    if BEGIN in text:
        head, _, rest = text.partition(BEGIN)
        text = head + body + rest.partition(END)[2]
    else:
        title, _, rest = text.partition("\n")
        text = f"{title}\n\n{body}\n{rest}"
    doc.write_text(text)


def render(section: dict[str, Any], machine: dict[str, Any]) -> str:
    data = section["data"]
    size, summary = data["size"], data["summary"]
    paths = summary["paths"]
    longest = max(t["history_tokens"] for t in paths["vllm"]["turns"])
    marks = {label: s for label, s in summary["saving"].items() if s}
    header = ["path", f"TTFT summed over the session ({size['turns']} turns)", "saved vs vLLM, per session",
              *[f"TTFT at {label} (turn {s['turn']})" for label, s in marks.items()], "total summed over the session"]
    rows = []
    for name, label in PATHS.items():
        own = paths[name]
        saved = (f"{_ms(own['session_saving_ms'])} ({own['session_saving_percent']['median']:.1f}%)"
                 if "session_saving_ms" in own else "(reference)")
        rows.append([label, _ms(own["session"]["ttft_ms"]), saved,
                     *[_ms(own["turns"][_turn_index(own, s["turn"])]["ttft_ms"]) for s in marks.values()],
                     _ms(own["session"]["total_ms"])])
    savings = "; ".join(
        f"at {label} ({s['history_tokens']:,} tokens) {s['gateway_http_saving_ms']:+.0f} ms over HTTP and "
        f"{s['gateway_ws_saving_ms']:+.0f} ms over WebSocket (vLLM {s['vllm_ttft_ms']:.0f} ms)"
        for label, s in marks.items()) or "not reached (a quick run: the history stays under 16k tokens)"
    return (
        "## Side by side with vLLM's own server\n\n"
        + _headline(paths, data["exactness"]) + "\n\n"
        f"One Codex-shaped session ({size['turns']} turns: Codex's real instructions and tools, then "
        f"reasoning + `exec_command` call + {size['tool_chars']:,} characters of output per turn, up to "
        f"{longest:,} tokens of history) replayed against **one** stock vLLM-CPU replica (prefix caching on): "
        "straight to vLLM's `POST /v1/responses` with the full history each turn, as Codex sends it, and through "
        "the gateway over HTTP (full history) and WebSocket (`previous_response_id`). "
        f"{size['repeats']} sessions per path, the paths taking turns; cells are the median with the "
        "min – max in brackets, in ms; *saved* compares each session with the vLLM session run beside it.\n\n"
        + _table(header, rows)
        + f"\nThe gateway's time-to-first-token saving per turn: {savings}. Where it comes from: "
        + _inside(paths, marks) + "\n\n"
        f"![time to first token per turn vs history length]({PNG_NAME})\n\n"
        + _per_turn(paths)
        + _exactness(data["exactness"])
        + _conditions(section, machine)
    )


def _inside(paths: dict[str, Any], marks: dict[str, Any]) -> str:
    """vLLM's own clock vs the rest, at the longest mark (or the last turn)."""
    turn = list(marks.values())[-1]["turn"] if marks else paths["vllm"]["turns"][-1]["turn"]
    at = {name: paths[name]["turns"][_turn_index(paths[name], turn)] for name in PATHS}
    return (f"at turn {turn} ({at['vllm']['history_tokens']:,} tokens) vLLM's own time-to-first-token clock "
            "(its `/metrics`, which starts when its server starts rendering the request) reads "
            f"{at['vllm']['vllm_ttft_ms']['median']:,.0f} ms on the direct path, which includes rendering and "
            f"tokenizing the whole history (its `/v1/responses/render` of that request alone: "
            f"{at['vllm']['render_ms']['median']:,.0f} ms), and {at['gateway_http']['vllm_ttft_ms']['median']:,.0f} / "
            f"{at['gateway_ws']['vllm_ttft_ms']['median']:,.0f} ms for the gateway's token ids (HTTP / WebSocket); "
            "the rest of the client's wait (HTTP, parsing the request, and all of the gateway's own work) is "
            f"{at['vllm']['outside_vllm_ms']['median']:,.0f} ms direct and "
            f"{at['gateway_http']['outside_vllm_ms']['median']:,.0f} / "
            f"{at['gateway_ws']['outside_vllm_ms']['median']:,.0f} ms through the gateway. The rest of each "
            "turn's time is the engine prefilling the new tokens against the cached history, the same on every path.")


def _headline(paths: dict[str, Any], exact: dict[str, Any] | None) -> str:
    """One sentence: the last turn's time to first token on each path, and the tokens lost."""
    last = {name: paths[name]["turns"][-1] for name in PATHS}
    text = (f"**In short:** at the session's last turn ({last['vllm']['history_tokens']:,} tokens of history) the "
            f"first token came after {last['vllm']['ttft_ms']['median']:,.0f} ms from vLLM's own server, "
            f"{last['gateway_http']['ttft_ms']['median']:,.0f} ms through the gateway over HTTP and "
            f"{last['gateway_ws']['ttft_ms']['median']:,.0f} ms over its WebSocket (medians).")
    if exact:
        lost = sum(exact[api]["vllm"]["tokens_differing"] for api in exact)
        generated = sum(exact[api]["vllm"]["generated_tokens"] for api in exact)
        kept = all(exact[api]["gateway"]["tokens_differing"] == 0 for api in exact)
        text += (f" Later prompts lost {lost} of {generated} generated tokens through vLLM's own server, "
                 + ("none through the gateway." if kept else "and some through the gateway: **see below**."))
    return text


def _per_turn(paths: dict[str, Any]) -> str:
    rows = [[turn["turn"], f"{turn['history_tokens']:,}",
             *[_ms(paths[name]["turns"][index]["ttft_ms"]) for name in PATHS], _ms(turn["render_ms"])]
            for index, turn in enumerate(paths["vllm"]["turns"])]
    return ("<details><summary>Every turn: time to first token (ms) by history length</summary>\n\n"
            + _table(["turn", "history tokens", *PATHS.values(), "vLLM /v1/responses/render"], rows)
            + "\n</details>\n\n")


def _exactness(exact: dict[str, Any] | None) -> str:
    if not exact:
        return ""
    rows = []
    for api, label in (("chat", "Chat Completions (RL rollout)"), ("responses", "Responses (Codex instructions)")):
        for server, name in (("vllm", "vLLM's own server"), ("gateway", "gateway")):
            r = exact[api][server]
            example = r.get("example")
            rows.append([label, name, r["turns_checked"], r["turns_differing"], r["generated_tokens"],
                         r["tokens_differing"], r["prefix_breaks"],
                         f"`{'|'.join(example['generated'])}` → `{'|'.join(example['next_prompt'])}`"
                         if example else ""])
    return ("**Exactness.** The model generates (temperature 1) and the client feeds its text back, each turn; "
            "each later prompt's ids are compared with the previous prompt + the ids the model generated "
            "(vLLM: `return_token_ids` / `enable_response_messages`; gateway: its rollout export). A turn differs "
            "when the generated ids are not in the next prompt unchanged:\n\n"
            + _table(["rollout", "server", "later turns", "turns differing", "generated tokens", "tokens differing",
                      "earlier prompt changed", "example: generated → next prompt"], rows)
            + "\nFor RL this is the difference between training on what the model did and on something else: "
            "re-tokenized text is not what the model sampled, so the logprobs, the loss mask and the context "
            "the trainer uses belong to a sequence the model never produced (off-policy by construction). "
            "A random model drifts often; a trained one less often, but at scale every batch has some.\n\n")


def _conditions(section: dict[str, Any], machine: dict[str, Any]) -> str:
    return (f"*Measured on* {machine['cpu']}, {machine['cores']} cores, {machine['ram_gb']} GB RAM, "
            f"vLLM-CPU {machine['vllm'] or '?'} with a tiny random Qwen3 (2 layers, Qwen3's real tokenizer and "
            f"template), {section['measured_at']}, load average {section['load_average']}: a **2-core box shared "
            "with other work during the run** (other agents' test suites), so single turns are noisy; the "
            "min – max spread says how much. The gateway is pinned to one core, vLLM and the client share the "
            "other. A random model never calls a tool, so the session's turns are scripted: vLLM prefills and "
            "decodes 16 tokens for real on every path, and a local proxy (bench/versus_script.py, on all three "
            "paths alike) hands the gateway the scripted turn's tokens as the model's, as Codex's own model "
            "turn would be.\n\n"
            "*On a GPU.* Here the engine's part dominates: on two loaded CPU cores even this 2-layer model takes "
            "seconds to prefill a turn's ~2k new tokens against 64k tokens of cached history, so the saving is a "
            "few percent of a session. On a GPU the engine's part shrinks for this model and grows with a real "
            "one's size, for all three paths alike, while vLLM's rendering and tokenizing of the whole history "
            "stays CPU work in its API server that grows with the history, whatever the accelerator (and queues "
            "there under concurrency): the saving per turn stays and becomes a larger share of a turn's time to "
            "first token. No GPU was lent to this run, so that part is reasoning, not measurement.\n")


def _turn_index(path: dict[str, Any], turn: int) -> int:
    return next(i for i, t in enumerate(path["turns"]) if t["turn"] == turn)


def _ms(spread: dict[str, float]) -> str:
    return f"{spread['median']:,.0f} [{spread['min']:,.0f} – {spread['max']:,.0f}]"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
