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
of `n`), its prompt ids and generated ids exactly as they went and came.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.push import Hold, Sink
from gateway.core.sampling import SamplingOptions
from gateway.pipeline.request import TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn, handed_on
from gateway.upstream.disaggregation import PREFILL_PARAMS, open_legs, prefill_sampling
from gateway.upstream.protocol import parse_usage
from gateway.upstream.replica import Replica, UpstreamStream
from gateway.upstream.stream import StreamMode

__all__ = ["COMPLETIONS", "GENERATE", "TokenTurn"]

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
        if request.rollout is not None and path == COMPLETIONS and not body.get("return_token_ids"):
            self._body = {**body, "return_token_ids": True}
            self._strip_ids = True

    async def start(self) -> None:
        """Get the request accepted by a replica (another one if one cannot take it); with
        prefill/decode roles in the pool, maybe after a prefill leg (gateway/upstream/disaggregation.py)
        — not when the client does its own (its body has `kv_transfer_params`)."""
        record = self.record

        async def send(replica: Replica, kv: dict | None) -> UpstreamStream:
            body = {**self._body, "model": self.adapter or replica.served_model or self._body.get("model"),
                    "request_id": record.request_id}
            if kv is not None:
                body["kv_transfer_params"] = kv
            if self.runtime.salt_by_version and "cache_salt" not in body:
                body["cache_salt"] = replica.weight_version  # the weights' own blocks only
            record.attempts += 1
            stream = await replica.forward(self.path, orjson.dumps(body), record.request_id, self.stream_mode)
            record.replica = replica.url
            return stream

        pool, salt = self.runtime.pool, self._body.get("cache_salt")
        self.use_adapter()
        if not pool.disaggregated or "kv_transfer_params" in self._body or not record.prompt_ids or self.adapter:
            self._stream = await pool.open(lambda r: send(r, None), record.request_id, self.affinity,
                                           prompt_ids=record.prompt_ids or None, cache_salt=salt, adapter=self.adapter)
            return
        self._stream, self.legs = await open_legs(pool, send, self._prefill_body, record.request_id, self.affinity,
                                                  prompt_ids=record.prompt_ids, cache_salt=salt)
        record.split = self.legs.fields() if self.legs is not None else None

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
            out = [self._take(payload) for payload in payloads]
            self.record.versions_seen(stream.replica.weight_version, self._reported)
            return handed_on(sink, out)

        async with self._generating():
            try:
                await stream.relay(take)  # type: ignore[arg-type]
            except _PullFailed:
                stream = self._stream = await self._local_decode()
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

    def _take(self, payload: bytes) -> bytes:
        """Record what `payload` (one event, or the whole answer) says; the payload to hand on."""
        event = orjson.loads(payload)
        if not isinstance(event, dict) or "error" in event:
            return payload  # the replica's in-stream error: passed on, and nothing finishes
        record = self.record
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
            if choice.get("finish_reason") is not None:
                record.finish_reason = choice["finish_reason"]
                self._reported = choice.get("weight_versions")  # vLLM's spans, on generate's last choice
        if not self._strip_ids:
            return payload
        for choice in event.get("choices") or ():
            for name in _ID_FIELDS:
                if name in choice:
                    choice[name] = None  # as vLLM answers when not asked
        return orjson.dumps(event)


class _PullFailed(Exception):
    """The decode leg's first event was an error: its pull failed."""


def _is_error(payload: bytes) -> bool:
    return payload.startswith(b'{"error"') or b'"error":' in payload[:40]


def _chosen_logprobs(raw: Any, count: int) -> list[float]:
    """The sampled tokens' logprobs in either answer's shape (generate: `content[].logprob`,
    completions: `token_logprobs`); NaN where there are none."""
    if isinstance(raw, dict):
        if isinstance(content := raw.get("content"), list):
            return [entry.get("logprob", float("nan")) for entry in content]
        if isinstance(values := raw.get("token_logprobs"), list):
            return [float("nan") if value is None else value for value in values]
    return [float("nan")] * count
