"""`stream_id` lanes: requests on one lane run in order, lanes run side by side.

Bounds per connection: `max_running` responses generate at once, `max_lanes` lanes
have work, and a lane holds `max_queued` requests (the running one included). Past a
bound a request is refused (`concurrent_request`), never silently dropped. Requests
without a `stream_id` share the default lane (None).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from gateway.ws.error_events import concurrent_request

__all__ = ["Lanes"]

Job = TypeVar("Job")


class Lanes(Generic[Job]):
    def __init__(self, run: Callable[[Job], Awaitable[None]], *, max_running: int = 16, max_lanes: int = 32,
                 max_queued: int = 16) -> None:
        self._run = run
        self.max_lanes = max_lanes
        self.max_queued = max_queued
        self._running = asyncio.Semaphore(max_running)
        self._queues: dict[str | None, deque[Job]] = {}
        self._workers: set[asyncio.Task[None]] = set()

    def submit(self, lane: str | None, job: Job) -> None:
        """Queue `job` on `lane`; raises APIError(concurrent_request) past a bound."""
        queue = self._queues.get(lane)
        if queue is None:
            if len(self._queues) >= self.max_lanes:
                raise concurrent_request(f"{self.max_lanes} stream_id lanes are already busy")
            queue = self._queues[lane] = deque()
            worker = asyncio.create_task(self._drain(lane, queue))
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)
        elif len(queue) >= self.max_queued:
            raise concurrent_request(f"{self.max_queued} responses are already queued on this lane")
        queue.append(job)

    @property
    def busy(self) -> bool:
        """Some request is running or queued."""
        return bool(self._queues)

    async def _drain(self, lane: str | None, queue: deque[Job]) -> None:
        try:
            while queue:
                try:
                    async with self._running:
                        await self._run(queue[0])
                finally:
                    queue.popleft()
        finally:
            del self._queues[lane]

    async def close(self) -> None:
        """Cancel everything running or queued (the socket is gone)."""
        workers = list(self._workers)
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
