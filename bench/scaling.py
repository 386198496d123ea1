"""Measurements 1 and 5: per-turn preparation (bench.prepare) and its curve over history length."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

MODES = {  # bench.prepare's modes, as the table and the plot name them
    "gateway_cached_http": "gateway, cached (HTTP, full history)",
    "gateway_ws_continuation": "gateway, WebSocket continuation",
    "gateway_uncached": "gateway, uncached first turn",
    "vllm_render": "vLLM /v1/responses/render",
}


def available() -> bool:
    return importlib.util.find_spec("bench.prepare") is not None


def run(*, quick: bool, vllm_url: str | None) -> list[dict[str, Any]] | None:
    """bench.prepare's rows, or None when this checkout has no bench/prepare.py yet."""
    if not available():
        return None
    from bench import prepare

    return prepare.run(quick=quick, vllm_url=vllm_url)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, 4.5), dpi=120)
    for mode, label in MODES.items():
        points = sorted((r["tokens"], r["p50_ms"]) for r in rows if r["mode"] == mode)
        if points:
            axes.plot(*zip(*points), marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("prompt length (tokens)")
    axes.set_ylabel("per-turn preparation, p50 (ms)")
    axes.set_title("Prompt preparation vs history length")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    pyplot.close(figure)
