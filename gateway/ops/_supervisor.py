"""Supervise local vLLM replicas: start, wait for health, warm up, watch, restart, stop.

The supervisor runs on its own event loop in a background thread, so the gateway keeps
running in the main thread exactly as `vllm-gateway serve` runs it (uvicorn, its signal
handling and its drain). A replica counts as down when its process exits or when its
/health fails UNHEALTHY_AFTER probes in a row (a hung engine); it is then stopped (its
whole process group), restarted after a backoff and warmed up again. The gateway's pool
notices the outage and the recovery through its own health checks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import httpx

from gateway.ops.vllm_process import VLLMError, VLLMProcess

__all__ = ["Supervisor"]

log = logging.getLogger(__name__)

# A restart costs a model load, and a replica starved of CPU (another one loading on the same cores)
# answers /health late without being hung: about a minute of silence before it counts as hung. The
# gateway's pool stops routing to it at its own first failed check meanwhile.
HEALTH_TIMEOUT = 10.0  # seconds a /health probe may take
UNHEALTHY_AFTER = 6  # failed /health probes in a row after which a live server counts as hung
MAX_BACKOFF = 60.0  # seconds; restart delays double from 1 s up to this
STABLE_AFTER = 600.0  # seconds up after which a replica's restarts-in-a-row count starts over
# A port chosen free can be taken by another process before vLLM binds it; at start-up such a
# replica starts again on a new port (its URL is not yet anybody's), this many times at most.
PORT_RETRIES = 3


@dataclass(eq=False)
class Supervisor:
    """`on_give_up` is called (from the supervisor's thread) once every replica has died more
    than `max_restarts` times in a row: nothing is left to serve."""

    replicas: list[VLLMProcess]
    _: KW_ONLY
    max_restarts: int = 5
    ready_timeout: float = 1800.0
    health_interval: float = 5.0
    stop_timeout: float = 30.0
    on_give_up: Callable[[], None] | None = None
    gave_up: bool = field(default=False, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False)
    _work: asyncio.Task | None = field(default=None, init=False)
    _running: threading.Event = field(default_factory=threading.Event, init=False)  # _loop and _work are set
    _ready: threading.Event = field(default_factory=threading.Event, init=False)  # start-up finished, well or not
    _error: BaseException | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.replicas = list(self.replicas)

    @property
    def urls(self) -> list[str]:
        return [replica.url for replica in self.replicas]

    def start(self) -> None:
        """Start every replica and block until all are healthy and warmed up; then keep them up
        in the background until `stop()`. Raises VLLMError (with the end of vLLM's log) if one
        exits or is not ready within `ready_timeout`."""
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(),), name="vllm-supervisor",
                                        daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Stop supervising and stop every replica: SIGTERM, then SIGKILL after `stop_timeout`."""
        if self._thread is None:
            return
        self._running.wait()
        try:
            self._loop.call_soon_threadsafe(self._work.cancel)  # type: ignore[union-attr]
        except RuntimeError:
            pass  # the loop is closed: the supervisor already stopped (every replica given up)
        self._thread.join()

    async def _run(self) -> None:
        # `stop()` cancels only the work, so stopping the replicas cannot itself be interrupted.
        self._loop, self._work = asyncio.get_running_loop(), asyncio.create_task(self._start_and_supervise())
        self._running.set()
        try:
            await self._work
        except asyncio.CancelledError:
            pass
        finally:
            await asyncio.gather(*(asyncio.to_thread(r.stop, self.stop_timeout) for r in self.replicas))
            log.info("stopped %d vLLM replica(s)", len(self.replicas))

    async def _start_and_supervise(self) -> None:
        try:
            for replica in self.replicas:
                replica.start()
            async with asyncio.TaskGroup() as group:  # the first failure cancels the other waits
                for replica in self.replicas:
                    group.create_task(self._bring_up(replica, started=True, may_move=True))
        except ExceptionGroup as failures:
            self._error = failures.exceptions[0]
            return
        except VLLMError as exc:
            self._error = exc
            return
        except OSError as exc:  # no such vLLM command
            self._error = VLLMError(f"cannot start vLLM: {exc}")
            return
        finally:
            self._ready.set()
        await asyncio.gather(*(self._supervise(replica) for replica in self.replicas))
        self.gave_up = True
        if self.on_give_up is not None:
            self.on_give_up()

    async def _bring_up(self, replica: VLLMProcess, *, started: bool = False, may_move: bool = False) -> None:
        """Start `replica` (unless `started`), wait until it is ready and warm it up. `may_move`: it
        has no users yet, so one that lost its port starts again on a new one."""
        for attempt in range(PORT_RETRIES + 1):
            if not started:
                replica.start()
            started = False
            try:
                await replica.wait_ready(timeout=self.ready_timeout)
                break
            except VLLMError:
                if not (may_move and replica.port_chosen and attempt < PORT_RETRIES and replica.lost_its_port()):
                    raise
            taken = replica.url
            await asyncio.to_thread(replica.stop, self.stop_timeout)
            replica.move()
            log.warning("vLLM replica %s exited: another process took an address it binds before it could; "
                        "starting it again on %s", taken, replica.url)
        await warm_up(replica.url)
        log.info("vLLM replica %s is warm", replica.url)

    async def _supervise(self, replica: VLLMProcess) -> None:
        """Restart `replica` whenever it goes down, with a growing delay; return once it has gone
        down more than `max_restarts` times in a row."""
        restarts, up_since = 0, time.monotonic()
        while True:
            reason = await self._until_down(replica)
            log.error("vLLM replica %s %s; the end of its log:\n%s", replica.url, reason, replica.log_tail())
            if time.monotonic() - up_since >= STABLE_AFTER:
                restarts = 0
            await asyncio.to_thread(replica.stop, self.stop_timeout)  # and whatever is left of its engine
            if restarts == self.max_restarts:
                log.error("vLLM replica %s went down %d times in a row: giving it up", replica.url, restarts + 1)
                return
            restarts += 1
            delay = min(2.0 ** (restarts - 1), MAX_BACKOFF)
            log.warning("restarting vLLM replica %s in %.0f s (restart %d of at most %d in a row)", replica.url,
                        delay, restarts, self.max_restarts)
            await asyncio.sleep(delay)
            up_since = time.monotonic()
            try:
                await self._bring_up(replica)
            except VLLMError as exc:
                log.error("vLLM replica %s did not come back: %s", replica.url, str(exc).splitlines()[0])

    async def _until_down(self, replica: VLLMProcess) -> str:
        """Watch a running replica; return why it is down."""
        misses = 0
        async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT) as client:
            while True:
                if (code := replica.returncode) is not None:
                    return f"exited with code {code}"
                if replica.pid is None:
                    return "is not running"
                try:
                    healthy = (await client.get(replica.url + "/health")).status_code == 200
                except httpx.HTTPError:
                    healthy = False
                misses = 0 if healthy else misses + 1
                if misses >= UNHEALTHY_AFTER:
                    return f"failed {misses} health checks in a row"
                await asyncio.sleep(self.health_interval if healthy else 1.0)


async def warm_up(url: str) -> None:
    """One tiny completion, so the first real request does not pay for lazy initialization."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=5.0)) as client:
        try:
            model = (await client.get(url + "/v1/models")).json()["data"][0]["id"]
            response = await client.post(url + "/v1/completions",
                                         json={"model": model, "prompt": [0], "max_tokens": 1})
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            raise VLLMError(f"warm-up request to {url} failed: {exc!r}") from exc
    if response.status_code != 200:
        raise VLLMError(f"warm-up request to {url} failed: {response.status_code} {response.text[:500]}")
