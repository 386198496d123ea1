"""Real Redis topologies for the shared-state tests, each started once where it is needed.

`redis_server`: one redis-server per module (tests restart or fill it). `redis_cluster` (3
masters + 3 replicas) and `redis_sentinel` (a master, a replica, 3 sentinels): one each for the
whole run, shared by every test that only reads and writes (each test has its own key
namespace); a test that kills nodes starts its own (tests/support/redis_topologies.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import RedisServer
from tests.support.redis_topologies import RedisClusterSet, RedisSentinelSet


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterSet]:
    with RedisClusterSet() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinelSet]:
    with RedisSentinelSet() as sentinel:
        yield sentinel
