"""Real Redis Cluster and Sentinel sets of the test's own, on loopback, that a test can fail over.

    with RedisClusterSet() as cluster:       # 3 masters + 3 replicas (redis-cli --cluster create)
        Settings(..., state_url=cluster.url)  # redis://127.0.0.1:PORT?cluster=true
        cluster.kill_master_of(key)           # kill -9 the master holding a key's slot
        cluster.wait_promoted(port)           # until its replica took the slot over

    with RedisSentinelSet() as sentinel:     # 1 master, 1 replica, 3 sentinels
        Settings(..., state_url=sentinel.url) # redis+sentinel://…/gateway
        sentinel.kill_master(); sentinel.wait_switched()

Debian's `redis-server` package provides redis-server, redis-sentinel's mode and redis-cli
(scripts/bootstrap.sh installs it). Failure detection is fast (`cluster-node-timeout`, Sentinel's
`down-after-milliseconds`: 1 s), and a promotion is waited for by reading the nodes' own
state, never by sleeping a guess.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

import pytest
import redis

from gateway.ops.vllm_process import free_port
from tests.support.redis_server import SOCKET_TIMEOUT

NODE_TIMEOUT_MS = 1000
MASTER = "gateway"  # the Sentinel master's name
FIXTURES = {"redis": "redis_server", "cluster": "redis_cluster", "sentinel": "redis_sentinel"}  # tests/store/


def state_url(request: pytest.FixtureRequest, topology: str) -> str:
    """The `--state-url` of the running `topology` (redis | cluster | sentinel), its fixture started
    if no test started it yet."""
    return request.getfixturevalue(FIXTURES[topology]).url


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (apt-get install redis-server; scripts/bootstrap.sh does it)"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    return path


def _ports(n: int) -> list[int]:
    """`n` distinct free loopback ports."""
    ports: list[int] = []
    while len(ports) < n:
        if (port := free_port()) not in ports:
            ports.append(port)
    return ports


def _until(condition, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if found := condition():
                return found
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting until {what}")
        time.sleep(0.02)


class _Processes:
    def __init__(self, prefix: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}  # by port

    def start(self, port: int, *args: str) -> None:
        log = self.dir / f"redis-{port}.log"
        self.processes[port] = process = subprocess.Popen(
            [_binary("redis-server"), *args, "--logfile", str(log)], cwd=self.dir, stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT)
        _until(lambda: process.poll() is not None or self.client(port).ping(), f"redis-server on {port} answered")
        assert process.poll() is None, f"redis-server on {port} exited: {log.read_text()[-2000:]}"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)

    def kill(self, port: int) -> None:
        """kill -9: no shutdown, no last write."""
        process = self.processes.pop(port)
        process.send_signal(signal.SIGKILL)
        process.wait(5)

    def stop(self) -> None:
        for port in list(self.processes):
            self.kill(port)
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisClusterSet(_Processes):
    """Three masters, each with one replica."""

    def __init__(self) -> None:
        super().__init__("gateway-test-cluster-")
        ports = _ports(12)
        self.ports, self.bus_ports = ports[:6], ports[6:]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}?cluster=true&{SOCKET_TIMEOUT}"

    def start_all(self) -> Self:
        for port, bus in zip(self.ports, self.bus_ports, strict=True):
            self.start(port, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                       "--cluster-port", str(bus), "--cluster-config-file", f"nodes-{port}.conf",
                       "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--cluster-require-full-coverage", "no",
                       "--save", "", "--appendonly", "no")
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        created = subprocess.run([_binary("redis-cli"), "--cluster", "create", *nodes, "--cluster-replicas", "1",
                                  "--cluster-yes"], check=False, capture_output=True, text=True, timeout=120)
        assert created.returncode == 0, created.stdout + created.stderr
        _until(self._settled, "every node saw the cluster whole (state ok, each replica in sync)")
        return self

    def _settled(self) -> bool:
        for port in self.ports:
            info = self.client(port).cluster("info")
            if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) != 6:
                return False
        return len(self.masters()) == 3 and all(
            self.client(port).info("replication").get("master_link_status") == "up"
            for port in self.ports if port not in self.masters())

    def masters(self) -> list[int]:
        """The ports of the masters that hold slots, as the live nodes see it."""
        ports = set()
        for line in self._nodes().splitlines():
            fields = line.split()
            if "master" in fields[2] and "fail" not in fields[2] and len(fields) > 8:
                ports.add(int(fields[1].split("@")[0].rpartition(":")[2]))
        return sorted(ports)

    def master_of(self, key: str) -> int:
        """The port of the master holding `key`'s slot."""
        slot = self.client(self._alive()).cluster("keyslot", key)
        for start, end, (_, port, *_), *_ in self.client(self._alive()).cluster("slots"):
            if start <= slot <= end:
                return int(port)
        raise AssertionError(f"no master holds slot {slot}")

    def replica_of(self, master: int) -> int:
        master_id = self.client(master).cluster("myid").decode()
        for line in self._nodes().splitlines():
            fields = line.split()
            if fields[3] == master_id:
                return int(fields[1].split("@")[0].rpartition(":")[2])
        raise AssertionError(f"{master} has no replica")

    def wait_replicated(self, master: int) -> None:
        """Until the master's replica has every write the master acknowledged."""
        replica = self.replica_of(master)
        _until(lambda: self.client(replica).info("replication")["slave_repl_offset"]
               >= self.client(master).info("replication")["master_repl_offset"], f"{replica} caught up with {master}")

    def wait_promoted(self, replica: int) -> None:
        """Until `replica` is a master serving its slots and every live node's slot map says so
        (the failover's end, as the nodes see it)."""
        def promoted() -> bool:
            if self.client(replica).info("replication")["role"] != "master":
                return False
            for port in self.processes:
                owners = {int(owner[1]) for _, _, owner, *_ in self.client(port).cluster("slots")}
                if replica not in owners or not owners <= set(self.processes):
                    return False
            return True

        _until(promoted, f"{replica} was promoted", timeout=60)

    def _alive(self) -> int:
        return next(port for port in self.ports if port in self.processes)

    def _nodes(self) -> str:
        reply = self.client(self._alive()).cluster("nodes")
        return reply if isinstance(reply, str) else "\n".join(
            f"{info['node_id']} {address} {info['flags']} {info['master_id']} 0 0 0 {info['connected']} "
            f"{' '.join(str(s) for s in info.get('slots', []))}" for address, info in reply.items())

    def __enter__(self) -> Self:
        try:
            return self.start_all()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisSentinelSet(_Processes):
    """A master, its replica, and three sentinels watching them."""

    def __init__(self) -> None:
        super().__init__("gateway-test-sentinel-")
        self.master, self.replica, *self.sentinels = _ports(5)

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in self.sentinels) + f"/{MASTER}?{SOCKET_TIMEOUT}"

    def start_all(self) -> Self:
        common = ("--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
        self.start(self.master, "--port", str(self.master), *common)
        self.start(self.replica, "--port", str(self.replica), "--replicaof", "127.0.0.1", str(self.master), *common)
        for port in self.sentinels:
            config = self.dir / f"sentinel-{port}.conf"
            config.write_text(f"port {port}\nbind 127.0.0.1\n"
                              f"sentinel monitor {MASTER} 127.0.0.1 {self.master} 2\n"
                              f"sentinel down-after-milliseconds {MASTER} {NODE_TIMEOUT_MS}\n"
                              f"sentinel failover-timeout {MASTER} 10000\n")
            self.start(port, str(config), "--sentinel")
        _until(self._settled, "every sentinel knew the replica and the other two sentinels")
        return self

    def _settled(self) -> bool:
        if self.client(self.replica).info("replication").get("master_link_status") != "up":
            return False
        return all(len(self.client(port).sentinel_slaves(MASTER)) == 1
                   and len(self.client(port).sentinel_sentinels(MASTER)) == 2 for port in self.sentinels)

    def current_master(self) -> int:
        return int(self.client(self.sentinels[0]).sentinel_get_master_addr_by_name(MASTER)[1])

    def wait_replicated(self) -> None:
        master = self.current_master()
        other = self.replica if master == self.master else self.master
        _until(lambda: self.client(other).info("replication")["slave_repl_offset"]
               >= self.client(master).info("replication")["master_repl_offset"], "the replica caught up")

    def kill_master(self) -> int:
        """kill -9 the current master; returns the port that should take over."""
        master = self.current_master()
        self.kill(master)
        return self.replica if master == self.master else self.master

    def wait_switched(self, to: int) -> None:
        """Until every sentinel names `to` the master and it acts as one (+switch-master's end)."""
        _until(lambda: all(int(self.client(p).sentinel_get_master_addr_by_name(MASTER)[1]) == to
                           for p in self.sentinels)
               and self.client(to).info("replication")["role"] == "master", f"{to} became the master", timeout=60)

    def __enter__(self) -> Self:
        try:
            return self.start_all()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
