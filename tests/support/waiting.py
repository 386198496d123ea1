"""Waiting for what another thread or process does next, with a deadline that fails loudly.

The deadline is generous (a minute): it only bounds how long a broken test takes to fail, and
a shared, loaded machine must never make a working one fail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

DEADLINE = 60.0  # seconds any wait in the tests may take
PROCESS_START = 180.0  # seconds a child process (a gateway, its tokenizer load) may take to answer


def wait_for(condition: Callable[[], object], what: str = "the condition held", timeout: float = DEADLINE,
             interval: float = 0.02) -> None:
    """Return once `condition()` is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting until {what}"
        time.sleep(interval)


async def async_wait_for(condition: Callable[[], object], what: str = "the condition held",
                         timeout: float = DEADLINE, interval: float = 0.02) -> None:
    """`wait_for` for a test running on an event loop: yields to it between checks."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting until {what}"
        await asyncio.sleep(interval)
