"""Steering a generation while it runs: stop it at the exact ids it wrote so far.

A WebSocket `response.steer` (gateway/ws/_steer.py) asks the response it names to stop so that
its successor can continue from it with the client's new input. The gateway can stop at the
exact ids the client was shown: the turn's output (gateway/pipeline/_output.py) ends with the
ids already taken from the replica, the upstream request is aborted, and the turn is recorded
with `finish_reason` "steered" — a cut turn, whose tokens the successor's prompt continues as
it would a turn cut by the length limit (the template closes it, then the new user turn).

A tool call being written is the one place not to cut: half a call's arguments is a call the
client cannot run, so a steer that arrives inside one stops the turn where that call ends.
`Steering` travels in the turn request, so a tool loop's later generations stay steerable.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Steering"]


class Steering:
    """One response's steering switch: `request()` from the socket, `bind()` by the running turn."""

    __slots__ = ("_stop", "requested")

    def __init__(self) -> None:
        self.requested = False  # asked to stop; the turn that starts next stops at once too
        self._stop: Callable[[], None] | None = None

    def bind(self, stop: Callable[[], None] | None) -> None:
        """The running generation's stop (None once it ended); called now if a steer came first."""
        self._stop = stop
        if stop is not None and self.requested:
            stop()

    def request(self) -> None:
        """Stop the response's generation at the ids it wrote so far (at the end of a tool call
        being written); idempotent."""
        self.requested = True
        if self._stop is not None:
            self._stop()
