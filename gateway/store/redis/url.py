"""What a `--state-url` names, checked before the gateway starts, and redis-py's client for it.

- `redis://host:port/db`, `rediss://…`, `unix:///path.sock`: one Redis (redis-py's `Redis`);
- `redis://host:port?cluster=true` (`rediss://` too; several seeds as `host:port,host:port`):
  a Redis Cluster through redis-py's `RedisCluster`, any node as seed; it finds the rest;
- `redis+sentinel://[[user]:password@]host:26379,host:26379/MASTER[/db]` (`rediss+sentinel://`
  for TLS to the master): the master a Sentinel set names, followed through its failovers
  (redis-py's `Sentinel`); `?sentinel_password=` authenticates to the sentinels themselves.

Query options are redis-py's URL options (`socket_timeout`, `max_connections`, …);
`socket_timeout` is also the deadline of a whole call (gateway/store/linkpy: 0.5 s
when the URL does not set it). A URL
the gateway cannot use is a `ValueError` that says what is wrong, at start, never a
`TypeError` from inside redis-py at the first turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS

__all__ = ["connect", "parse"]

EXAMPLES = ("redis://host:6379/0, rediss://…, unix:///path/redis.sock, redis://host:6379?cluster=true "
            "(Redis Cluster) or redis+sentinel://host:26379,host:26379/MASTER_NAME (Sentinel)")
_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")


@dataclass(frozen=True)
class StoreAddress:
    topology: str  # single | cluster | sentinel
    url: str  # as given (a single Redis is opened from it)
    nodes: tuple[tuple[str, int], ...] = ()  # cluster seeds or sentinels
    master: str | None = None  # the Sentinel master's name
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)
    tls: bool = False
    options: dict[str, Any] = field(default_factory=dict)  # redis-py's URL options, parsed

    @property
    def label(self) -> str:
        """Where it is, without credentials: for logs and metrics."""
        if self.topology == "sentinel":
            return f"sentinel:{self.master}"
        if self.nodes:
            return ",".join(f"{host}:{port}" for host, port in self.nodes)
        scheme, sep, rest = self.url.partition("://")
        return f"{scheme}{sep}{rest.rpartition('@')[2]}".split("?")[0]


def parse(url: str) -> StoreAddress:
    """`url` understood, or a ValueError naming what is wrong with it."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _SCHEMES:
        raise _bad(url, f"the scheme must be one of {', '.join(s + '://' for s in _SCHEMES)}")
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    cluster = _flag(url, query.pop("cluster", "false"), "cluster")
    sentinel_password = query.pop("sentinel_password", None)
    if sentinel_password is not None and "sentinel" not in scheme:
        raise _bad(url, "sentinel_password is for redis+sentinel:// URLs")
    options = _options(url, query)
    db_option = options.pop("db", None)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    credentials = {"username": unquote(username) or None, "password": unquote(password) or None}
    plain = url.replace("?" + parts.query, "?" + _without(parts.query, "cluster")) if parts.query else url
    if scheme == "unix":
        if cluster:
            raise _bad(url, "a Redis Cluster is reached over TCP (redis://host:port?cluster=true), not a unix socket")
        if not parts.path:
            raise _bad(url, "no socket path (unix:///path/to/redis.sock)")
        return StoreAddress("single", plain, options=options)
    nodes = _nodes(url, hosts, 26379 if "sentinel" in scheme else 6379)
    path = [p for p in parts.path.split("/") if p]
    if "sentinel" in scheme:
        if cluster:
            raise _bad(url, "cluster=true and Sentinel exclude each other")
        if not path:
            raise _bad(url, "no master name: redis+sentinel://host:26379,host:26379/MASTER_NAME[/db]")
        if len(path) > 2:
            raise _bad(url, "the path is /MASTER_NAME or /MASTER_NAME/db")
        return StoreAddress("sentinel", url, nodes, master=unquote(path[0]),
                            db=_db(url, path[1] if len(path) > 1 else "0"), sentinel_password=sentinel_password,
                            tls=scheme.startswith("rediss"), options=options, **credentials)
    if len(path) > 1:
        raise _bad(url, "the path is the database number alone (/0)")
    db = _db(url, path[0] if path else str(db_option or 0))
    if cluster:
        if db:
            raise _bad(url, f"a Redis Cluster has database 0 only, not {db}")
        return StoreAddress("cluster", url, nodes, tls=scheme == "rediss", options=options, **credentials)
    if len(nodes) > 1:
        raise _bad(url, "several hosts are a cluster's seeds (add ?cluster=true) or sentinels (redis+sentinel://)")
    return StoreAddress("single", plain, db=db, options=options)


def connect(address: StoreAddress, *, timeout: float, **client: Any) -> Any:
    """redis-py's asyncio client for `address`: calls time out after `timeout` seconds; a
    connection error is retried once (a cluster's by gateway/store/linkpy)."""
    from redis.asyncio import Redis
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel
    from redis.backoff import NoBackoff

    common = {"socket_timeout": timeout, "socket_connect_timeout": timeout, "retry": Retry(NoBackoff(), 1),
              "health_check_interval": 0, **address.options, **client}
    if address.topology == "single":
        return Redis.from_url(address.url, **common)
    credentials = {"username": address.username, "password": address.password}
    if address.topology == "cluster":
        return RedisCluster(startup_nodes=[ClusterNode(host, port) for host, port in address.nodes],
                            require_full_coverage=False, ssl=address.tls, **credentials,
                            **{**common, "retry": Retry(NoBackoff(), 0)})  # the link retries, with a new slot map
    sentinels = Sentinel(list(address.nodes), sentinel_kwargs={
        "password": address.sentinel_password, "socket_timeout": timeout, "socket_connect_timeout": timeout},
                         **common)
    return sentinels.master_for(address.master, db=address.db, ssl=address.tls, **credentials, **common)


def _nodes(url: str, hosts: str, default_port: int) -> tuple[tuple[str, int], ...]:
    nodes = []
    for item in hosts.split(","):
        host, port = item, str(default_port)
        if item.startswith("["):  # [IPv6]:port
            host, _, rest = item[1:].partition("]")
            port = rest.removeprefix(":") or port
        elif item.count(":") == 1:
            host, _, port = item.partition(":")
        if not host:
            raise _bad(url, f"no host in {item!r}")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise _bad(url, f"{port!r} is not a port")
        nodes.append((host, int(port)))
    return tuple(nodes)


def _options(url: str, query: dict[str, str]) -> dict[str, Any]:
    options = {}
    for name, value in query.items():
        parser = URL_QUERY_ARGUMENT_PARSERS.get(name)
        if parser is None:
            known = ", ".join(sorted([*URL_QUERY_ARGUMENT_PARSERS, "cluster", "sentinel_password"]))
            raise _bad(url, f"unknown option {name!r} (known: {known})")
        try:
            options[name] = parser(value)
        except (TypeError, ValueError) as exc:
            raise _bad(url, f"{name}={value!r} is not valid: {exc}") from exc
    return options


def _flag(url: str, value: str, name: str) -> bool:
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no", ""):
        return False
    raise _bad(url, f"{name}={value!r}: expected true or false")


def _db(url: str, text: str) -> int:
    if not text.isdigit():
        raise _bad(url, f"the database must be a number, not {text!r}")
    return int(text)


def _without(query: str, name: str) -> str:
    return "&".join(p for p in query.split("&") if p.partition("=")[0] != name)


def _bad(url: str, why: str) -> ValueError:
    scheme, sep, rest = url.partition("://")
    safe = f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url
    return ValueError(f"--state-url {safe!r} cannot be used: {why}. Expected {EXAMPLES}")
