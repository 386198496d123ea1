"""A streaming request held open on purpose: it keeps its admission slot (the gateway's, a
tenant's) until the test releases it, so a limit is full for as long as the test needs."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from tests.support.waiting import DEADLINE


class Holder:
    """A streaming POST of `body` to `url` that is answered 200 and then held until `release()`."""

    def __init__(self, url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self.opened, self.released = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, args=(url, body, headers or {}))
        self.thread.start()
        assert self.opened.wait(DEADLINE), "the held request was not answered"

    def _hold(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        with httpx.stream("POST", url, json=body, headers=headers, timeout=DEADLINE) as response:
            assert response.status_code == 200
            self.opened.set()
            self.released.wait(DEADLINE)

    def release(self) -> None:
        self.released.set()
        self.thread.join(DEADLINE)
