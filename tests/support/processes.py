"""Process-tree inspection from /proc, for tests that check no vLLM process is left behind."""

from __future__ import annotations

from pathlib import Path


def _stats() -> dict[int, list[str]]:
    """pid → the fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, …)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
    return stats


def group_members(pgid: int) -> set[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    return {pid for pid, fields in _stats().items() if fields[0] != "Z" and int(fields[2]) == pgid}


def children(pid: int) -> set[int]:
    """Live direct children of `pid`."""
    return {child for child, fields in _stats().items() if fields[0] != "Z" and int(fields[1]) == pid}


def cmdline(pid: int) -> list[str]:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []
