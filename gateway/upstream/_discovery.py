"""Upstream URLs → replica URLs, one per address a hostname resolves to.

A Kubernetes headless service (or any DNS name with several A/AAAA records) becomes one
replica per pod; re-resolving follows scale-up and scale-down. Literal IPs and
`localhost` are used as given.

An upstream may name its replicas' role in prefill/decode disaggregation
(gateway/upstream/disaggregation.py): `prefill=URL` or `decode=URL`; without one they do both.
Every address a name resolves to takes its role.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

__all__ = ["ROLES", "Resolver", "split_role"]

ROLES = ("both", "prefill", "decode")

log = logging.getLogger(__name__)


def needs_dns(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return True
    return False


def split_role(upstream: str) -> tuple[str, str]:
    """`[ROLE=]URL` → (role, URL); "both" when none is named."""
    role, sep, url = upstream.partition("=")
    if sep and role in ROLES:
        return role, url.rstrip("/")
    if sep and "://" not in role:
        raise ValueError(f"upstream {upstream!r}: the role must be one of {', '.join(ROLES)}")
    return "both", upstream.rstrip("/")


class Resolver:
    def __init__(self, upstreams: Sequence[str]) -> None:
        named = [split_role(upstream) for upstream in upstreams]
        self.upstreams = [url for _, url in named]
        self._roles = {url: role for role, url in named}
        self.roles: dict[str, str] = {}  # replica URL → its role, as of the last `resolve`
        self._last: dict[str, list[str]] = {}  # last good answer per hostname URL

    @property
    def dynamic(self) -> bool:
        """Whether re-resolving can change anything."""
        return any(needs_dns(url) for url in self.upstreams)

    async def resolve(self) -> list[str]:
        """Every replica URL, in a stable order. A name that fails to resolve keeps its last
        answer: a DNS hiccup must not empty the pool."""
        urls: list[str] = []
        for upstream in self.upstreams:
            if not needs_dns(upstream):
                found = [upstream]
            else:
                try:
                    self._last[upstream] = await _addresses(upstream)
                except OSError as exc:
                    log.warning("cannot resolve %s: %r", upstream, exc)
                found = self._last.get(upstream, [])
            for url in found:
                self.roles.setdefault(url, self._roles[upstream])
            urls.extend(found)
        return list(dict.fromkeys(urls))


async def _addresses(url: str) -> list[str]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    infos = await asyncio.get_running_loop().getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    hosts = sorted({info[4][0] for info in infos})
    return [urlunsplit(parts._replace(netloc=f"{_bracket(host)}:{port}")) for host in hosts]


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
