"""A Responses API response as the exchange's writer: the events of one turn, for any transport.

HTTP (SSE or JSON), WebSocket mode and background responses all run a turn through
gateway/pipeline/exchange.py with a `ResponseEvents`; they differ only in `sink`, which frames
the events (SSE, WebSocket text frames, a background response's log) or drops them (a JSON
answer reads `answer()` at the end). A response with remote MCP tools runs their calls between
its generations (`run_tools`, gateway/adapters/responses/_mcp_tools.py). `CompactionEvents` is the summary turn of a
`compaction_trigger`: generated whole, answered as one `compaction` item, never kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.adapters import _logprobs as logprobs
from gateway.adapters._generation import coalesce, incomplete_reason, nemo_fields, token_fields
from gateway.adapters.responses import _mcp_tools as mcp_tools
from gateway.adapters.responses import compaction
from gateway.adapters.responses._mcp_tools import HostedTool
from gateway.adapters.responses.events import Event, ResponseWriter
from gateway.adapters.responses.input import ResponsesRequest
from gateway.core.conversation import ToolCall, ToolOutput
from gateway.core.errors import APIError
from gateway.core.push import Hold, Sink, held
from gateway.core.settings import Settings
from gateway.formats.base import ParseEvent
from gateway.pipeline.exchange import ToolsRan
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn
from gateway.tokenfix.record import TurnRecord
from gateway.upstream import mcp

__all__ = ["CompactionEvents", "ResponseEvents", "new_writer", "plan_hosted"]

# A generation that failed, as a non-streaming answer's status (the failure's own code kept).
_FAILED_STATUS = {"upstream_timeout": 504, "server_shutting_down": 503}


def new_writer(runtime: Runtime, response_id: str, parsed: ResponsesRequest, spec: str) -> ResponseWriter:
    """The writer of a response, its echo completed with the sampling values actually used: a
    `temperature` or `top_p` the request left out is the model's generation default
    (generation_config.json), else vLLM's own (1.0). `spec`: `--responses-spec`."""
    echo = parsed.echo
    for key in ("temperature", "top_p"):
        if echo.get(key) is None:
            echo[key] = float(runtime.defaults.values.get(key, 1.0))
    return ResponseWriter(response_id=response_id, model=parsed.model, echo=echo, spec=spec)


def _dropped(events: list[Event]) -> Hold:
    return None


class ResponseEvents:
    """created … completed | incomplete | failed for one turn, each upstream read's events
    handed to `sink` together. Without `sink` (a JSON answer) the events are only tracked, and
    `response()` is the answer. A failure before any output is raised (an HTTP error, a
    WebSocket error event), except a prompt too long for the context window when streaming:
    that is a failed response, which Codex acts on."""

    keeps = True

    def __init__(self, writer: ResponseWriter, parsed: ResponsesRequest, sink: Sink[list[Event]] | None = None) -> None:
        self.writer = writer
        self.parsed = parsed
        self.sink = sink or _dropped
        self.streamed = sink is not None
        self._on_parse_event = writer.on_parse_event
        self.last: Event | None = None  # the final event, once there is one
        self._started = False
        self._generations: list[TurnRecord] = []  # of a response whose MCP calls the gateway runs
        self._n_calls = 0

    def started(self, turn: Turn) -> Hold:
        self._started = True
        writer = self.writer
        if self.parsed.text_logprobs and turn.record.logprobs is not None:
            chat_format, record = turn.runtime.format, turn.record
            writer.logprobs = lambda span: logprobs.entries(chat_format, record, *span)
        events = writer.start()
        if (plan := self.parsed.mcp) is not None:  # what came before the first generation: listings, approved calls
            writer.hosted = plan.tools
            for item in plan.first_items:
                events += writer.mcp_item(item)
            self._n_calls = len(plan.calls_before)
            turn.record.tool_calls = [_call_meta(hosted, outcome) for hosted, outcome in plan.calls_before] or None
        return self.sink(events)

    def events(self, parse_events: list[ParseEvent]) -> Hold:
        """The Responses events of one read's parse events (at engine pace, one event: one call)."""
        if len(parse_events) == 1:
            events = self._on_parse_event(parse_events[0])
        else:
            events = []
            for parse_event in coalesce(parse_events):
                events += self._on_parse_event(parse_event)
        return self.sink(events) if events else None

    async def run_tools(self, turn: Turn) -> ToolsRan | None:
        """The MCP calls the generation made, run one after another (each one's outcome written as
        it comes): the response goes on unless the generation also called a client's function or
        asked for an approval, or the response's calls are spent (gateway/pipeline/exchange.py)."""
        plan = self.parsed.mcp
        if plan is None:
            return None
        record = turn.record
        self._generations.append(record)
        calls = [item for item in record.output_items if isinstance(item, ToolCall)]
        runnable = [call for call in calls if call.name in plan.tools and not plan.tools[call.name].approval]
        if not runnable or record.finish_reason != "stop":
            return None
        outputs, meta = [], []
        for call in runnable:
            hosted = plan.tools[call.name]
            if self._n_calls >= plan.max_calls:
                outcome = mcp.McpResult(None, mcp.McpError({
                    "type": "mcp_protocol_error", "code": -32000,
                    "message": f"Not run: this response made its {plan.max_calls} tool calls (max_tool_calls)."}), 0.0)
            else:
                self._n_calls += 1
                outcome = await mcp.call_tool(hosted.server.server, hosted.tool.name, call.arguments,
                                              timeout=plan.timeout, max_output_bytes=plan.max_output_bytes)
            await held(self.sink(self.writer.mcp_call_done(mcp_tools.CALL_PREFIX + call.call_id, outcome)))
            text = outcome.output if outcome.error is None else outcome.error.message
            outputs.append(ToolOutput(call_id=call.call_id, output=text or "", name=call.name))
            meta.append(_call_meta(hosted, outcome))
        go_on = len(runnable) == len(calls) and self._n_calls < plan.max_calls
        return ToolsRan(outputs, meta, go_on)

    def answer(self, turn: Turn) -> dict[str, Any] | None:
        self.last = final_event(turn.record, self.writer, self.parsed, incomplete_reason(turn))
        if len(self._generations) > 1 and "usage" in self.last["response"]:
            self.last["response"]["usage"] = total_usage(self._generations)
        return self.last["response"]

    def ended(self, turn: Turn) -> Hold:
        assert self.last is not None, "answer() first"
        return self.sink([self.last])

    def failed(self, turn: Turn, error: APIError) -> Hold:
        writer = self.writer
        if self._started:
            self.last = writer.failed(error.code or "server_error", error.message, usage(turn.record))
            return self.sink([self.last])
        if not self.streamed or error.code != "context_length_exceeded":
            raise error  # an HTTP error: Codex retries 429/5xx and fails at once on 400
        self.last = writer.failed(error.code, error.message)
        return self.sink([*writer.start(), self.last])

    def response(self) -> dict[str, Any]:
        """The Response object of a turn run to its end; a failed one is an APIError."""
        final = self.last
        assert final is not None, "the exchange ran"
        if final["type"] == "response.failed":
            code, message = self.writer.failure or ("server_error", final["response"]["error"]["message"])
            raise APIError(message, status=_FAILED_STATUS.get(code, 502), type="server_error", code=code)
        return final["response"]


class CompactionEvents(ResponseEvents):
    """The summary turn of a `compaction_trigger` (gateway/adapters/responses/compaction.py): its text is
    not streamed but answered as one `compaction` item; what it generated is not history."""

    keeps = False

    def events(self, parse_events: list[ParseEvent]) -> Hold:
        return None

    def answer(self, turn: Turn) -> dict[str, Any] | None:
        record, writer = turn.record, self.writer
        if record.finish_reason == "abort":
            self.last = writer.failed("server_error", "the replica aborted the generation", usage(record))
            self._summary: list[Event] = []
            return None
        self._summary = writer.whole_item(compaction.compaction_item(compaction.summary_text(record.output_items)))
        self.last = writer.incomplete(usage(record), incomplete_reason(turn)) if record.finish_reason == "length" \
            else writer.completed(usage(record))
        return None

    def ended(self, turn: Turn) -> Hold:
        assert self.last is not None, "answer() first"
        return self.sink([*self._summary, self.last])


def final_event(turn: TurnRecord, writer: ResponseWriter, parsed: ResponsesRequest,
                reason: str = "max_output_tokens") -> Event:
    """`reason`: what a turn cut for length says ended it (`incomplete_reason`)."""
    if parsed.return_token_ids:
        writer.extra = token_fields(turn)
        if writer.output:  # NeMo-Gym's convention: the turn's last output item carries its ids
            writer.output[-1].update(nemo_fields(turn))
    if turn.finish_reason == "length":
        return writer.incomplete(usage(turn), reason)
    if turn.finish_reason == "steered":  # a WebSocket `response.steer` stopped it (gateway/ws/_steer.py)
        return writer.incomplete(usage(turn), "steered")
    if turn.finish_reason == "abort":
        return writer.failed("server_error", "the replica aborted the generation", usage(turn))
    return writer.completed(usage(turn))


def _call_meta(hosted: HostedTool, outcome: mcp.McpResult) -> dict[str, Any]:
    """An MCP call as the next generation's record (and a rollout's turn) lists it."""
    return {"server_label": hosted.label, "name": hosted.tool.name, "seconds": round(outcome.seconds, 6),
            "error": outcome.error.message if outcome.error is not None else None}


async def plan_hosted(parsed: ResponsesRequest, body: dict[str, Any], settings: Settings) -> None:
    """The request's remote MCP tools, admitted and listed before the response starts
    (gateway/adapters/responses/_mcp_tools.py)."""
    parsed.mcp = await mcp_tools.plan(parsed.tools, parsed.approvals, parsed.conversation, parsed.listed, settings,
                                      body.get("max_tool_calls"))


def total_usage(records: Sequence[TurnRecord]) -> dict[str, Any]:
    """The usage of a response of several generations: each one's prompt and output counted."""
    shown = [usage(record) for record in records]
    return {"input_tokens": sum(u["input_tokens"] for u in shown),
            "input_tokens_details": {"cached_tokens": sum(u["input_tokens_details"]["cached_tokens"] for u in shown),
                                     "cache_write_tokens": 0},
            "output_tokens": sum(u["output_tokens"] for u in shown),
            "output_tokens_details": {"reasoning_tokens": sum(u["output_tokens_details"]["reasoning_tokens"]
                                                              for u in shown)},
            "total_tokens": sum(u["total_tokens"] for u in shown)}


def usage(turn: TurnRecord) -> dict[str, Any]:
    output = len(turn.output_ids)
    return {
        "input_tokens": turn.input_tokens,
        "input_tokens_details": {"cached_tokens": turn.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        "total_tokens": turn.input_tokens + output,
    }
