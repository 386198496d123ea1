"""Admitting, watching and ejecting one replica.

A replica is routable only after it answered /health, told us its model, and served a
one-token warmup generation on the token endpoint the turns use (vLLM's /health is 200
before the first request has compiled anything). A routable replica is checked every
`interval`; a failing one (or one a request found unreachable) is ejected and re-admitted
the same way, retried with capped exponential backoff; one that outlier detection ejected
(gateway/upstream/outlier.py) not before its ejection time is over.

A check that is refused or answered with an error ejects at once: the server is gone or says it
is unwell. A check that times out does not: vLLM's API server shares its CPU with the engine, and
on a loaded host a busy, healthy replica answers late. Only `unhealthy_threshold` timeouts in a
row eject (Envoy's active health checking counts the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Literal

import httpx

from gateway.core.ids import new_id
from gateway.upstream.protocol import PATHS, UpstreamAPI, request_body
from gateway.upstream.replica import Replica

__all__ = ["HealthPolicy", "admit", "watch"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HealthPolicy:
    interval: float = 5.0  # between checks of a routable replica
    backoff_min: float = 0.5  # first retry of a failing replica; doubles up to backoff_max
    backoff_max: float = 30.0
    timeout: float = 5.0  # of /health and /v1/models
    unhealthy_threshold: int = 3  # checks in a row that time out before a routable replica is ejected
    warmup_timeout: float = 120.0  # the first generation may compile kernels


async def admit(replica: Replica, api: str, policy: HealthPolicy) -> bool:
    """Probe and warm up `replica`; True (and routable) if it served the warmup."""
    client = replica.client
    try:
        (await client.get(replica.url + "/health", timeout=policy.timeout)).raise_for_status()
        models = await client.get(replica.url + "/v1/models", timeout=policy.timeout)
        listed = models.raise_for_status().json()["data"]
        model = listed[0]
        replica.served_model = model["id"]
        replica.max_model_len = model.get("max_model_len")
        # LoRA adapters it already holds (vLLM lists them after the base model, with a `parent`)
        replica.adapters = {m["id"]: m.get("root") for m in listed[1:] if m.get("parent")}
        replica.api = api if api != "auto" else await _detect_api(replica, policy)  # type: ignore[assignment]
        await _warmup(replica, policy)
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        log.info("replica %s not ready: %r", replica.url, exc)
        return False
    except Exception:  # never let the watcher die: its replica would stay unwatched for good
        log.exception("replica %s not ready: unexpected error", replica.url)
        return False
    if replica.state in ("starting", "ejected"):  # not dropped from DNS meanwhile
        replica.state = "ready"
        if replica.detector is not None:
            replica.detector.readmitted(replica)
    log.info("replica %s ready: model=%s max_model_len=%s api=%s", replica.url, replica.served_model,
             replica.max_model_len, replica.api)
    return True


Outcome = Literal["ok", "failed", "timed out"]


async def check(replica: Replica, policy: HealthPolicy) -> Outcome:
    """One /health probe of a routable replica."""
    try:
        response = await replica.client.get(replica.url + "/health", timeout=policy.timeout)
    except httpx.TimeoutException:
        return "timed out"
    except httpx.HTTPError:
        return "failed"
    except Exception:  # as in admit()
        log.exception("health check of %s failed: unexpected error", replica.url)
        return "failed"
    return "ok" if response.status_code == 200 else "failed"


async def watch(replica: Replica, api: str, policy: HealthPolicy) -> None:
    """Run for the replica's lifetime in the pool: keep `replica.state` true to what it can do."""
    delay, timeouts = policy.backoff_min, 0
    while True:
        if replica.healthy:
            await _sleep(replica, policy.interval)
            if not replica.healthy:
                continue
            outcome = await check(replica, policy)
            timeouts = timeouts + 1 if outcome == "timed out" else 0
            if outcome == "failed":
                replica.eject("health check failed", kind="health_check")
            elif timeouts >= policy.unhealthy_threshold:
                replica.eject(f"{timeouts} health checks in a row got no answer within {policy.timeout:g} s",
                              kind="health_check")
            elif timeouts:
                log.info("health check of %s got no answer within %g s (%d of %d in a row before it is ejected)",
                         replica.url, policy.timeout, timeouts, policy.unhealthy_threshold)
            continue
        timeouts = 0
        if (held := replica.outlier.held_until - time.monotonic()) > 0:  # its ejection time, whatever wakes it
            await asyncio.sleep(held)
        if await admit(replica, api, policy):
            delay = policy.backoff_min
            continue
        await _sleep(replica, delay)
        delay = min(delay * 2, policy.backoff_max)


async def _sleep(replica: Replica, seconds: float) -> None:
    """Sleep, unless a request saw the replica fail (`replica.wake`): then check at once."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(replica.wake.wait(), seconds)
    replica.wake.clear()


async def _detect_api(replica: Replica, policy: HealthPolicy) -> UpstreamAPI:
    """/inference/v1/generate if the replica serves it (vLLM --enable-scale-out), else /v1/completions."""
    body = request_body("generate", model=replica.served_model or "", prompt_ids=[0], sampling={"max_tokens": 1},
                        request_id=new_id("probe"), stream=False)
    response = await replica.client.post(replica.url + PATHS["generate"], json=body, timeout=policy.warmup_timeout)
    return "generate" if response.status_code == 200 else "completions"


async def _warmup(replica: Replica, policy: HealthPolicy) -> None:
    body = request_body(replica.api, model=replica.served_model or "", prompt_ids=[0], sampling={"max_tokens": 1},
                        request_id=new_id("warmup"), stream=False)
    response = await replica.client.post(replica.url + PATHS[replica.api], json=body, timeout=policy.warmup_timeout)
    response.raise_for_status()
