"""What a replica reports about its load and its KV cache, read from its /metrics.

The router weighs a prefix against load, and sizes its record of what it sent by the
replica's KV capacity; vLLM's Prometheus page has both (summed over a replica's engines):

- `vllm:num_requests_waiting`: requests queued (from every gateway process and pod) because
  the replica is saturated, beyond the gateway's own in-flight count; and
  `vllm:num_requests_running`;
- `vllm:kv_cache_usage_perc`: how full the KV cache is (a full one preempts and evicts);
- `vllm:cache_config_info`'s labels `kv_cache_size_tokens` (else `num_gpu_blocks` ×
  `block_size`): the tokens the cache holds, the bound of the sent-prompt index;
- `process_start_time_seconds`: a new value means the replica restarted, with an empty cache;
- `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total`: prompt tokens looked up in
  its prefix cache, and found (what the status page shows as the replica's hit rate).

A replica without /metrics (a stand-in, a proxy that hides it) stays `known = False`, and
routing uses the gateway's own in-flight counts alone.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import httpx

__all__ = ["ReplicaLoad", "parse", "watch"]

log = logging.getLogger(__name__)

_SAMPLE = re.compile(r"^(vllm:num_requests_running|vllm:num_requests_waiting|vllm:kv_cache_usage_perc"
                     r"|vllm:prefix_cache_queries_total|vllm:prefix_cache_hits_total"
                     r"|process_start_time_seconds)(?:\{[^}]*\})? ([^ \n]+)", re.MULTILINE)
_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass
class ReplicaLoad:
    known: bool = False  # a /metrics page was read
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0  # 0..1
    capacity_tokens: int | None = None  # KV cache size, in tokens
    block_size: int | None = None
    started_at: float | None = None
    prefix_queries: int = 0  # prompt tokens looked up in its prefix cache, since it started
    prefix_hits: int = 0  # …and found there


def parse(text: str) -> ReplicaLoad:
    """The figures of a vLLM /metrics page (Prometheus text)."""
    load = ReplicaLoad(known=True)
    for name, value in _SAMPLE.findall(text):
        number = float(value)
        if name == "vllm:num_requests_running":
            load.running += int(number)
        elif name == "vllm:num_requests_waiting":
            load.waiting += int(number)
        elif name == "vllm:kv_cache_usage_perc":
            load.kv_usage = max(load.kv_usage, number)
        elif name == "vllm:prefix_cache_queries_total":
            load.prefix_queries += int(number)
        elif name == "vllm:prefix_cache_hits_total":
            load.prefix_hits += int(number)
        else:
            load.started_at = number
    for labels in _CACHE_INFO.findall(text):
        info = dict(_LABEL.findall(labels))
        tokens = _int(info.get("kv_cache_size_tokens"))
        blocks, block_size = _int(info.get("num_gpu_blocks")), _int(info.get("block_size"))
        if tokens is None and blocks is not None and block_size is not None:
            tokens = blocks * block_size
        if tokens is not None:
            load.capacity_tokens = min(load.capacity_tokens or tokens, tokens)
        load.block_size = block_size or load.block_size
    return load


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


async def watch(url: str, client: httpx.AsyncClient, interval: float,
                on_update: Callable[[ReplicaLoad], None]) -> None:
    """Read `url`/metrics every `interval` seconds for as long as it runs; `on_update` gets
    each reading. A replica that has no /metrics is asked again only every minute."""
    while True:
        try:
            response = await client.get(url + "/metrics", timeout=max(interval, 2.0))
            if response.status_code == 404:
                await asyncio.sleep(max(interval, 60.0))
                continue
            response.raise_for_status()
            on_update(parse(response.text))
        except httpx.HTTPError as exc:  # the figures go stale; the health checks judge the replica
            log.debug("metrics of %s: %r", url, exc)
        except Exception:  # never let the reader die
            log.exception("metrics of %s: unexpected error", url)
        await asyncio.sleep(interval)
