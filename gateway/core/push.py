"""Push, not pull: how each layer hands the next what it has, from where it has it.

An upstream read hands its token chunks to the turn, the turn its item events to the API's
writer, the writer its events or bytes to the transport: each through a `Sink`. A sink is
called with the next piece and returns None to go on, or a `Hold` — an awaitable (a slow
client's drain) that the caller waits for before it hands on more. At engine pace this is what
keeps a token cheap: no task wakes up and no generator resumes for it on its way to the socket.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["Hold", "Sink", "held"]

T = TypeVar("T")

Hold = Awaitable[None] | None
Sink = Callable[[T], Hold]


async def held(hold: Hold) -> None:
    """Wait for what a sink asked to wait for, if anything."""
    if hold is not None:
        await hold
