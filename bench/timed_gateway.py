"""`python -m bench.timed_gateway serve …`: the gateway, with each of its tracing helpers timed
by the CPU clock of the thread that runs it (`time.thread_time_ns`), to see where a traced
gateway's extra CPU goes in the process itself, where a helper costs several times what it
costs in a loop of its own (every other request's code runs between two calls: the caches are
cold). At exit the totals (ns, calls) by helper go to the JSON file $TIMED_GATEWAY_OUT. A
helper's time includes the helpers it calls (an ended span's processor, inside its end) and
the clock's own cost, about 0.6 µs a call on the 2-core box (reported as `clock`).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import runpy
import sys
import time
from collections.abc import Callable
from typing import Any

totals: dict[str, list[int]] = {}


def _timed(owner: Any, name: str, label: str) -> None:
    """Replace `owner.name` by itself timed, counted under `label`."""
    function: Callable[..., Any] = getattr(owner, name)
    clock = time.thread_time_ns

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = clock()
        try:
            return function(*args, **kwargs)
        finally:
            total = totals.setdefault(label, [0, 0])
            total[0] += clock() - started
            total[1] += 1

    setattr(owner, name, timed)


def install() -> None:
    import gateway.server.app  # noqa: F401  (the gateway's modules, imported in its own order first)
    from gateway.core import tracing
    from gateway.server import otlp

    # The generation's and the request's span helpers are their packages' own (not for other
    # code to import): an instrument reaches them where the gateway loaded them.
    spans, observe = sys.modules["gateway.pipeline._spans"], sys.modules["gateway.server._observe"]

    for name in ("start_request", "end_request", "start_span", "upstream_headers", "phase", "current"):
        _timed(tracing, name, f"tracing.{name}")
    for name in ("open_generation", "end_generation"):
        _timed(spans, name, f"spans.{name}")
    _timed(observe, "_end_span", "observe._end_span (the request's outcome on its span, then end_request)")
    for cls, method in ((tracing._Current, "__enter__"), (tracing._Current, "__exit__"),
                        (tracing._Phase, "__enter__"), (tracing._Phase, "__exit__"),
                        (otlp.Batches, "on_end")):
        _timed(cls, method, f"{cls.__name__}.{method}")
    _timed(otlp, "encode", "export thread: otlp.encode")
    _timed(otlp._HTTP, "export", "export thread: the exporter's export (encode and HTTP post)")
    started = time.thread_time_ns()
    for _ in range(1000):
        time.thread_time_ns()
    totals["clock"] = [time.thread_time_ns() - started, 1000]


def _write() -> None:
    with open(os.environ["TIMED_GATEWAY_OUT"], "w") as out:
        json.dump(totals, out)


if __name__ == "__main__":
    install()
    atexit.register(_write)
    runpy.run_module("gateway", run_name="__main__", alter_sys=True)
