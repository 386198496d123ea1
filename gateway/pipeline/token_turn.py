"""A token-in turn: a client's own request to vLLM's `/v1/completions` or
`/inference/v1/generate`, passed through to a replica — not rendered, not parsed — but owned
like every turn (gateway/pipeline/exchange.py).

RL trainers that render prompts themselves (TRL, AReaL, SkyRL, verifiers' TrainClient) send
token ids to these endpoints of a stock vLLM server. The gateway forwards their body as they
wrote it, with two changes: the replica's model name, and the gateway's request id (what an
abort names); and when it records the call but the client did not ask for the ids
(`return_token_ids`), it asks for them and nulls them in the answer again, as vLLM leaves them. What the
replica answers goes to the client event by event, byte for byte otherwise — vLLM's RL fields
(`routed_experts`, `weight_versions`, `sampling_mask`, `kv_transfer_params`) included.

What it shares with every turn: routing (the session key, else the prompt's prefix), failover
to another replica before anything was generated, the abort of the replica's work when the
client leaves, and the one commit: a finished call with a rollout is recorded in it (choice 0
of `n`), its prompt ids and generated ids exactly as they went and came. A generate call that may
be resumed (`splice`) and is cut by the fleet's abort pause goes on after the resume in a next
leg, spliced into the same answer (gateway/pipeline/partial_rollout.py).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from gateway.core.push import Hold, Sink
from gateway.core.sampling import SamplingOptions
from gateway.pipeline.partial_rollout import Splice
from gateway.pipeline.request import TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn, handed_on
from gateway.upstream.disaggregation import PREFILL_PARAMS, open_legs, prefill_sampling
from gateway.upstream.protocol import parse_usage
from gateway.upstream.replica import Replica, UpstreamStream
from gateway.upstream.stream import StreamMode

__all__ = ["COMPLETIONS", "GENERATE", "TokenTurn"]

log = logging.getLogger(__name__)

GENERATE, COMPLETIONS = "/inference/v1/generate", "/v1/completions"
_ID_FIELDS = ("token_ids", "prompt_token_ids")


class TokenTurn(Turn):
    def __init__(self, runtime: Runtime, request: TurnRequest, *, affinity: str | None) -> None:
        """Made by gateway/pipeline/session.py `prepare` for a request with `token_in`."""
        assert request.token_in is not None, "a token-in request"
        path, body, prompt_ids = request.token_in.path, request.token_in.body, request.token_in.prompt_ids
        wants_logprobs = body.get("logprobs") is not None if path == COMPLETIONS else \
            (body.get("sampling_params") or {}).get("logprobs") is not None
        super().__init__(runtime, request, sampling=SamplingOptions(logprobs=0 if wants_logprobs else None),
                         prefix=None, covered=None, affinity=affinity)
        self.path = path
        self.stream_mode: StreamMode = "events" if body.get("stream") else "body"
        self.record.prompt_ids = list(prompt_ids or ())
        self._body = body
        self._strip_ids = False  # the gateway asked for ids the client did not
        self._reported: list[dict[str, Any]] | None = None
        resumable = request.token_in.resumable
        self.splice = Splice(list(prompt_ids or ()), runtime.defaults.max_tokens) if resumable else None
        self._aborts = 0  # the fleet's abort pauses before the current leg was sent
        self._cut = False  # the current leg was ended by an abort pause: resume it
        if request.rollout is not None and path == COMPLETIONS and not body.get("return_token_ids"):
            self._body = {**body, "return_token_ids": True}
            self._strip_ids = True

    async def start(self) -> None:
        """Get the request accepted by a replica (another one if one cannot take it); with
        prefill/decode roles in the pool, maybe after a prefill leg (gateway/upstream/disaggregation.py)
        — not when the client does its own (its body has `kv_transfer_params`)."""
        record = self.record
        pool, salt = self.runtime.pool, self._body.get("cache_salt")
        self.use_adapter()
        if not pool.disaggregated or "kv_transfer_params" in self._body or not record.prompt_ids or self.adapter:
            self._stream = await pool.open(lambda r: self._send(r, None), record.request_id, self.affinity,
                                           prompt_ids=record.prompt_ids or None, cache_salt=salt, adapter=self.adapter)
            return
        self._stream, self.legs = await open_legs(pool, self._send, self._prefill_body, record.request_id,
                                                  self.affinity, prompt_ids=record.prompt_ids, cache_salt=salt)
        record.split = self.legs.fields() if self.legs is not None else None

    async def _send(self, replica: Replica, kv: dict | None) -> UpstreamStream:
        record, splice = self.record, self.splice
        body = splice.next_body(self._body) if splice is not None and splice.resumed else self._body
        body = {**body, "model": self.adapter or replica.served_model or body.get("model"),
                "request_id": record.request_id}
        if kv is not None:
            body["kv_transfer_params"] = kv
        if self.runtime.salt_by_version and "cache_salt" not in body:
            body["cache_salt"] = replica.weight_version  # the weights' own blocks only
        record.attempts += 1
        self._aborts = self.runtime.pool.barrier.aborts
        stream = await replica.forward(self.path, orjson.dumps(body), record.request_id, self.stream_mode)
        record.replica = replica.url
        return stream

    async def _resume(self) -> UpstreamStream:
        """The next leg of a generation the fleet's abort pause cut: sent once the fleet resumed
        (the pool waits at its barrier), from the prompt plus everything generated so far."""
        assert self._stream is not None and self.splice is not None
        await self._stream.aclose()
        self._cut = False
        record, splice = self.record, self.splice
        log.info("request %s: resuming after an abort pause with %d tokens generated", record.request_id,
                 len(splice.before_ids))
        return await self.runtime.pool.open(lambda r: self._send(r, None), record.request_id, self.affinity,
                                            prompt_ids=splice.prompt_ids + splice.before_ids,
                                            cache_salt=self._body.get("cache_salt"), adapter=self.adapter)

    def _prefill_body(self, replica: Replica) -> tuple[str, bytes]:
        """The client's request as a prefill leg: one token, not streamed, the prefill's transfer request."""
        body = {k: v for k, v in self._body.items() if k not in ("stream_options", "n")}
        body.update(model=replica.served_model or body.get("model"), request_id=self.record.request_id + "-prefill",
                    stream=False)
        if self.path == COMPLETIONS:
            body = prefill_sampling(body)
        else:
            body["sampling_params"] = {k: v for k, v in prefill_sampling(body.get("sampling_params") or {}).items()
                                       if k != "kv_transfer_params"}
            body["kv_transfer_params"] = PREFILL_PARAMS
        return self.path, orjson.dumps(body)

    async def relay(self, sink: Sink[list[bytes]]) -> None:
        """The replica's answer, pushed: each read's events (or the whole body) to `sink` as JSON
        payloads, recorded on the way. A decode leg whose pull failed (an error before anything
        was handed on) is retried once as a local prefill (`Turn._pulled_or_local`)."""
        stream = self._stream
        assert stream is not None, "start() first"
        handed: list[bool] = [False]

        def take(payloads: list[bytes]) -> Hold:
            if not handed[0] and self.legs is not None and self.legs.retry and _is_error(payloads[0]):
                stream.stop_relay()
                raise _PullFailed
            handed[0] = True
            out = [taken for payload in payloads if (taken := self._take(payload, stream)) is not None]
            self.record.versions_seen(stream.replica.weight_version, self._reported)
            return handed_on(sink, out) if out else None

        async with self._generating():
            try:
                await stream.relay(take)  # type: ignore[arg-type]
            except _PullFailed:
                stream = self._stream = await self._local_decode()
                await stream.relay(take)  # type: ignore[arg-type]
            while self._cut:
                stream = self._stream = await self._resume()
                await stream.relay(take)  # type: ignore[arg-type]

    async def _local_decode(self) -> UpstreamStream:
        legs, record = self.legs, self.record
        assert legs is not None and legs.decode is not None and self._stream is not None
        legs.retried()
        record.split = legs.fields()
        await self._stream.aclose()
        body = {**self._body, "model": legs.decode.served_model or self._body.get("model"),
                "request_id": record.request_id}
        record.attempts += 1
        return await legs.decode.forward(self.path, orjson.dumps(body), record.request_id, self.stream_mode)

    def _take(self, payload: bytes, stream: UpstreamStream) -> bytes | None:
        """Record what `payload` (one event, or the whole answer) says; the payload to hand on
        (None: nothing — what a leg the abort pause cut sends after its end, or its whole answer)."""
        event = orjson.loads(payload)
        if not isinstance(event, dict) or "error" in event:
            return payload  # the replica's in-stream error: passed on, and nothing finishes
        if self._cut:
            return None  # a cut leg's usage: the last leg's counts the whole output
        record, splice = self.record, self.splice
        resumed = splice is not None and splice.resumed
        if resumed:
            splice.head(event)  # type: ignore[union-attr]
        if event.get("usage"):
            record.usage = parse_usage(event)
        if not record.prompt_ids and isinstance(prompt := event.get("prompt_token_ids"), list):
            record.prompt_ids = prompt  # generate's answer carries it at the top
        for choice in event.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # n > 1: the rollout records the first sample
            if not record.prompt_ids and isinstance(prompt := choice.get("prompt_token_ids"), list):
                record.prompt_ids = prompt  # a text prompt, as the replica tokenized it
            ids = choice.get("token_ids") or ()
            record.output_ids.extend(ids)
            if record.logprobs is not None:
                record.logprobs.extend(_chosen_logprobs(choice.get("logprobs"), len(ids)))
            if choice.get("finish_reason") == "abort" and splice is not None and self._fleet_cut(stream):
                self._cut_leg(choice, stream)
                if self.stream_mode == "body":
                    return None  # the last leg's answer carries this one's tokens
                resumed = True
                continue
            if resumed:
                splice.choice(choice, whole=self.stream_mode == "body")  # type: ignore[union-attr]
            if choice.get("finish_reason") is not None:
                record.finish_reason = choice["finish_reason"]
                self._reported = choice.get("weight_versions")  # vLLM's spans, on generate's last choice
        if not self._strip_ids:
            return orjson.dumps(event) if resumed else payload
        for choice in event.get("choices") or ():
            for name in _ID_FIELDS:
                if name in choice:
                    choice[name] = None  # as vLLM answers when not asked
        return orjson.dumps(event)

    def _fleet_cut(self, stream: UpstreamStream) -> bool:
        """The fleet's abort pause (or sleep) ended this leg, not a trainer's /abort_requests."""
        return self.runtime.pool.barrier.aborts > self._aborts and not stream.cancelled

    def _cut_leg(self, choice: dict[str, Any], stream: UpstreamStream) -> None:
        """The leg ended by the abort pause: its choice no longer ends the answer, and the turn
        goes on in a next leg once the fleet resumed (`relay`)."""
        record, splice = self.record, self.splice
        assert splice is not None
        reported = choice.get("weight_versions")
        record.versions_seen(stream.replica.weight_version)  # the gateway's spans, for a leg vLLM gave none
        done = len(splice.before_ids)
        splice.cut(choice, reported or _tail(record.weight_versions, done), record.output_ids[done:])
        self._reported = splice.before_spans if reported is not None else None
        self._cut = True


class _PullFailed(Exception):
    """The decode leg's first event was an error: its pull failed."""


def _is_error(payload: bytes) -> bool:
    return payload.startswith(b'{"error"') or b'"error":' in payload[:40]


def _tail(spans: list[dict[str, Any]] | None, start: int) -> list[dict[str, Any]]:
    """The gateway's spans from output index `start` on, counted from there."""
    return [{**span, "start": max(span["start"], start) - start, "end": span["end"] - start}
            for span in spans or () if span["end"] > start]


def _chosen_logprobs(raw: Any, count: int) -> list[float]:
    """The sampled tokens' logprobs in either answer's shape (generate: `content[].logprob`,
    completions: `token_logprobs`); NaN where there are none."""
    if isinstance(raw, dict):
        if isinstance(content := raw.get("content"), list):
            return [entry.get("logprob", float("nan")) for entry in content]
        if isinstance(values := raw.get("token_logprobs"), list):
            return [float("nan") if value is None else value for value in values]
    return [float("nan")] * count
