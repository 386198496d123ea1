"""The deployment files: Kubernetes manifests, docker-compose.yml and the gateway Dockerfile.

Beyond parsing, every gateway command line in them goes through the gateway's own argparse
parser (a renamed flag breaks this test), and the pieces must agree with each other: labels
and selectors, ports across containers, probes and Services, the vLLM image and the vLLM
version the tests run, the gateway image and the project version.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.core.settings import Settings
from gateway.ops._flags import build_parser
from gateway.ops.vllm_process import VLLM_VERSION, vllm_python
from gateway.server.app import create_app
from gateway.store.redis.url import parse

ROOT = Path(__file__).parents[2]
K8S = ROOT / "deploy" / "k8s"
VARIANTS = sorted(path.parent for path in K8S.glob("*/kustomization.yaml"))
VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
GATEWAY_IMAGE = "vllm-agent-gateway:" + tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
KINDS = {"Deployment", "StatefulSet", "Service", "HorizontalPodAutoscaler"}
API_VERSIONS = {"Service": "v1", "HorizontalPodAutoscaler": "autoscaling/v2"}
REDIS_IMAGE = "redis:7.2.5"


def dockerfile() -> dict[str, str]:
    """The gateway Dockerfile's instructions (the last of each kind), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "deploy" / "Dockerfile").read_text())
    lines = [line.split(None, 1) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return {parts[0]: parts[1] for parts in lines}


ENTRYPOINT = json.loads(dockerfile()["ENTRYPOINT"])
IMAGE_ENV = dict(pair.split("=", 1) for pair in dockerfile()["ENV"].split())


def documents(variant: Path) -> list[dict]:
    kustomization = yaml.safe_load((variant / "kustomization.yaml").read_text())
    files = kustomization["resources"]
    # Every manifest in the directory is part of the variant, and nothing else is.
    assert sorted(files) == sorted(p.name for p in variant.glob("*.yaml") if p.name != "kustomization.yaml")
    return [doc for name in files for doc in yaml.safe_load_all((variant / name).read_text()) if doc]


def workloads(docs: list[dict]) -> list[dict]:
    return [doc for doc in docs if doc["kind"] in ("Deployment", "StatefulSet")]


def containers(docs: list[dict]) -> list[tuple[dict, dict]]:
    """(workload, container) pairs."""
    return [(doc, container) for doc in workloads(docs) for container in doc["spec"]["template"]["spec"]["containers"]]


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def container_port(container: dict, port: int | str) -> int:
    """A probe's or Service's port, resolved against the container: a named containerPort,
    a declared number, or the `--port` the server is started with."""
    declared = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    if isinstance(port, str):
        assert port in declared, f"{container['name']} has no port named {port}"
        return declared[port]
    listens = {*declared.values(), int(flag(container.get("args", []), "--port") or 0)}
    assert port in listens, f"{container['name']} does not listen on {port}"
    return port


def gateway_argv(container: dict) -> list[str]:
    """The gateway's argv after `vllm-gateway`: the image's ENTRYPOINT unless overridden, then args."""
    command = container.get("command") or ENTRYPOINT
    assert command[0] == "vllm-gateway"
    return [*command[1:], *container.get("args", [])]


def parse_gateway(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch):
    """Parse like the container would: GATEWAY_* variables are the flags' defaults."""
    for name in [n for n in os.environ if n.startswith("GATEWAY_")]:
        monkeypatch.delenv(name)
    for name, value in {**IMAGE_ENV, **env}.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(argv)
    for name in {**IMAGE_ENV, **env}:
        if name.startswith("GATEWAY_"):
            assert name.removeprefix("GATEWAY_").lower() in vars(args), f"{name} sets no gateway flag"
    return args


def container_env(container: dict) -> dict[str, str]:
    # Secret-backed values are not in the manifest; what matters is that the variable is known.
    return {e["name"]: e.get("value", "from-a-secret") for e in container.get("env", [])}


GATEWAY_ROUTES = {route.path for route in create_app(Settings(model="unused")).routes}


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_manifests_are_well_formed(variant: Path) -> None:
    docs = documents(variant)
    assert {doc["kind"] for doc in docs} <= KINDS
    for doc in docs:
        assert doc["apiVersion"] == API_VERSIONS.get(doc["kind"], "apps/v1")
        assert doc["metadata"]["name"]
    for workload in workloads(docs):
        selector = workload["spec"]["selector"]["matchLabels"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), f"{workload['metadata']['name']}: selector misses its pods"
    for _, container in containers(docs):
        image = container["image"]
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest", f"{image} is not pinned"
        assert image in (VLLM_IMAGE, GATEWAY_IMAGE, REDIS_IMAGE)
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container.get(kind) or {}
            if port := (probe.get("httpGet") or probe.get("tcpSocket") or {}).get("port"):
                container_port(container, port)


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_services_reach_a_container_port(variant: Path) -> None:
    docs = documents(variant)
    services = [doc for doc in docs if doc["kind"] == "Service"]
    assert services
    for service in services:
        selected = [w for w in workloads(docs)
                    if service["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(selected) == 1, f"Service {service['metadata']['name']} selects {len(selected)} workloads"
        pods = selected[0]["spec"]["template"]["spec"]["containers"]
        for port in service["spec"]["ports"]:
            named = [c for c in pods if any(p.get("name") == port["targetPort"] for p in c.get("ports", []))]
            assert named, f"Service {service['metadata']['name']}: no container port {port['targetPort']}"


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_gateway_containers_parse_and_point_at_vllm(variant: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = documents(variant)
    gateways = [(w, c) for w, c in containers(docs) if c["image"] == GATEWAY_IMAGE]
    vllms = [(w, c) for w, c in containers(docs) if c["image"] == VLLM_IMAGE]
    assert gateways and vllms
    for workload, gateway in gateways:
        args = parse_gateway(gateway_argv(gateway), container_env(gateway), monkeypatch)
        assert args.command == "serve" and args.host == "0.0.0.0"
        assert args.port == container_port(gateway, "http")
        # The probes the pod relies on exist in the app: readiness reflects vLLM's, liveness does not.
        assert gateway["readinessProbe"]["httpGet"]["path"] == "/ready"
        assert gateway["livenessProbe"]["httpGet"]["path"] == "/live"
        assert {"/ready", "/live"} <= GATEWAY_ROUTES
        # Kubernetes must wait for the drain before it kills the container.
        pause = int(gateway["lifecycle"]["preStop"]["exec"]["command"][-1])
        assert workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > pause + args.drain_timeout
        [upstream] = args.upstream
        target = urlsplit(upstream)
        for _, vllm in vllms:  # the same model, and the port vLLM listens on
            assert vllm["args"][0] == args.model and "--model" not in vllm["args"]  # vllm serve's positional model
            assert int(flag(vllm["args"], "--port")) == target.port  # type: ignore[arg-type]
        if target.hostname == "127.0.0.1":  # sidecar: vLLM in the same pod
            assert any(c is not gateway and c["image"] == VLLM_IMAGE
                       for c in workload["spec"]["template"]["spec"]["containers"])
        else:  # a headless Service in front of the vLLM pods, resolved to each of them
            [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == target.hostname]
            assert service["spec"]["clusterIP"] == "None"
            assert [p["port"] for p in service["spec"]["ports"]] == [target.port]
            assert args.resolve_interval > 0


def test_multi_replica_gateways_share_state_in_redis_and_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = documents(K8S / "multi-replica")
    [(deployment, gateway)] = [(w, c) for w, c in containers(docs) if c["image"] == GATEWAY_IMAGE]
    args = parse_gateway(gateway_argv(gateway), container_env(gateway), monkeypatch)
    state = urlsplit(args.state_url)
    assert state.scheme == "redis" and args.workers >= 1
    [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == state.hostname]
    [redis] = [c for w, c in containers(docs) if service["spec"]["selector"].items()
               <= w["spec"]["template"]["metadata"]["labels"].items()]
    assert redis["image"] == REDIS_IMAGE
    [port] = [p for p in service["spec"]["ports"] if p["port"] == state.port]
    assert container_port(redis, port["targetPort"]) == 6379
    # Any pod continues any session: no client affinity, and the Deployment scales on CPU.
    [front] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == deployment["metadata"]["name"]]
    assert "sessionAffinity" not in front["spec"]
    [hpa] = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": deployment["metadata"]["name"]}
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    assert gateway["resources"]["requests"]["cpu"] == str(args.workers)  # one core per worker


def test_multi_replica_gateways_subscribe_to_the_replicas_kv_events(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = documents(K8S / "multi-replica")
    [(_, gateway)] = [(w, c) for w, c in containers(docs) if c["image"] == GATEWAY_IMAGE]
    [(_, vllm)] = [(w, c) for w, c in containers(docs) if c["image"] == VLLM_IMAGE]
    config = json.loads(vllm["args"][vllm["args"].index("--kv-events-config") + 1])
    assert config["enable_kv_cache_events"] and config["publisher"] == "zmq"
    [spec] = parse_gateway(gateway_argv(gateway), container_env(gateway), monkeypatch).kv_events
    endpoint, replay = spec.split(",")  # every replica by its host: the headless Service's pod addresses
    for subscribed, published in ((endpoint, config["endpoint"]), (replay, config["replay_endpoint"])):
        assert subscribed.startswith("tcp://{host}:") and published.startswith("tcp://*:")
        port = int(subscribed.rpartition(":")[2])
        assert port == int(published.rpartition(":")[2]) == container_port(vllm, port)


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_vllm_containers_serve_the_token_endpoint(variant: Path) -> None:
    for _, vllm in [(w, c) for w, c in containers(documents(variant)) if c["image"] == VLLM_IMAGE]:
        assert vllm["command"] == ["vllm", "serve"]
        assert "--enable-scale-out" in vllm["args"]  # /inference/v1/generate
        assert vllm["startupProbe"]["httpGet"]["path"] == "/health"


def compose_services() -> dict[str, dict]:
    """docker-compose.yml as `docker compose` reads it with nothing set: ${VAR:-default} → default."""
    text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", (ROOT / "docker-compose.yml").read_text())
    return yaml.safe_load(text)["services"]


def test_compose_gateway_parses_and_points_at_its_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    services = compose_services()
    gateway = services["gateway"]
    assert gateway["build"]["dockerfile"] == "deploy/Dockerfile" and gateway["image"] == GATEWAY_IMAGE
    argv = [*ENTRYPOINT[1:], *gateway.get("command", [])]
    args = parse_gateway(argv, {k: str(v) for k, v in gateway["environment"].items()}, monkeypatch)
    assert args.command == "serve" and args.host == "0.0.0.0"
    assert gateway["ports"] == [f"{args.port}:{args.port}"]
    assert args.model == "Qwen/Qwen3-8B"
    assert gateway["stop_grace_period"] == f"{int(args.drain_timeout) + 10}s"
    replicas = {urlsplit(url).hostname: urlsplit(url).port for url in args.env_upstreams}
    state = urlsplit(args.state_url)  # the workers share their state through the compose Redis
    assert args.workers > 1 and services[state.hostname]["image"] == REDIS_IMAGE and state.port == 6379
    assert gateway["depends_on"][state.hostname] == {"condition": "service_healthy"}
    assert set(replicas) | {state.hostname} == set(gateway["depends_on"]) == {
        n for n, service in services.items() if n != "gateway" and "profiles" not in service}
    for name, port in replicas.items():
        vllm = services[name]
        assert vllm["image"] == VLLM_IMAGE and vllm["entrypoint"] == ["vllm", "serve"]
        assert int(flag(vllm["command"], "--port")) == port  # type: ignore[arg-type]
        assert vllm["command"][0] == args.model and "--model" not in vllm["command"]  # the positional model
        assert "--enable-scale-out" in vllm["command"]
        assert gateway["depends_on"][name] == {"condition": "service_healthy"}
    # Each replica gets its own GPU.
    gpus = [services[n]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for n in replicas]
    assert sorted(gpus) == [["0"], ["1"]]


@pytest.mark.parametrize("profile", ["redis-cluster", "redis-sentinel"])
def test_compose_profiles_start_the_redis_topology_their_state_url_names(profile: str) -> None:
    """The header's `COMPOSE_PROFILES=… STATE_URL=…` lines: the URL parses and names that profile's nodes."""
    text = (ROOT / "docker-compose.yml").read_text()
    command = " ".join(line.lstrip("# ").rstrip("\\ ") for line in text.splitlines()
                       if line.startswith("#"))
    url = re.search(rf"COMPOSE_PROFILES={profile} +STATE_URL='?([^' ]+)", command).group(1)
    address = parse(url)
    services = compose_services()
    members = {name: s for name, s in services.items() if profile in s.get("profiles", [])}
    assert {host for host, _ in address.nodes} <= set(members)
    assert all(s["image"] == REDIS_IMAGE for s in members.values())
    if profile == "redis-cluster":
        assert address.topology == "cluster"
        nodes = [s for s in members.values() if "--cluster-enabled" in s.get("command", [])]
        assert len(nodes) == 6
        create = members["redis-cluster-init"]["command"][0]
        assert "--cluster create" in create and "--cluster-replicas 1" in create
        assert all(name in create for name in members if name != "redis-cluster-init")
    else:
        assert address.topology == "sentinel" and address.master == "gateway" and len(address.nodes) == 3
        assert "--replicaof" in members["redis-replica"]["command"]
        assert all(f"sentinel monitor {address.master} redis-master 6379 2" in members[host]["command"][0]
                   for host, _ in address.nodes)


def test_dockerfile_serves_on_the_port_it_exposes() -> None:
    instructions = dockerfile()
    assert ENTRYPOINT == ["vllm-gateway", "serve"]
    assert instructions["EXPOSE"] == IMAGE_ENV["GATEWAY_PORT"] and IMAGE_ENV["GATEWAY_HOST"] == "0.0.0.0"
    assert "/live" in instructions["HEALTHCHECK"]  # tests/deploy/test_dockerfile.py checks it further
    assert instructions["FROM"] == "python:3.11-slim"


@pytest.mark.vllm
def test_vllm_command_lines_parse_with_vllm_itself() -> None:
    """Every vLLM command line in the deployments, through the real vLLM's own parser."""
    argvs = [c["args"] for variant in VARIANTS for _, c in containers(documents(variant)) if c["image"] == VLLM_IMAGE]
    argvs += [service["command"] for service in compose_services().values() if service.get("image") == VLLM_IMAGE]
    script = (
        "import json, sys\n"
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)\n"
        "    print(json.dumps([args.model_tag, args.port, args.enable_scale_out]))\n"
    )
    result = subprocess.run([str(vllm_python()), "-c", script, json.dumps(argvs)], capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    parsed = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("[")]
    assert parsed == [["Qwen/Qwen3-8B", 8000, True]] * len(argvs)


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_gateway_keys_come_from_a_secret(variant: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key file the gateway reads is a mounted Secret, never a literal in the manifest."""
    for workload, gateway in [(w, c) for w, c in containers(documents(variant)) if c["image"] == GATEWAY_IMAGE]:
        args = parse_gateway(gateway_argv(gateway), container_env(gateway), monkeypatch)
        assert args.api_key is None and args.api_key_file
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        [mount] = [m for m in gateway["volumeMounts"] if args.api_key_file.startswith(m["mountPath"] + "/")]
        assert mount["readOnly"] is True
        secret = volumes[mount["name"]]["secret"]
        assert [item["path"] for item in secret["items"]] == [args.api_key_file.removeprefix(mount["mountPath"] + "/")]


def test_compose_gateway_keys_come_from_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    compose = yaml.safe_load(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", (ROOT / "docker-compose.yml").read_text()))
    gateway = compose["services"]["gateway"]
    args = parse_gateway([*ENTRYPOINT[1:]], {k: str(v) for k, v in gateway["environment"].items()}, monkeypatch)
    [name] = gateway["secrets"]
    assert args.api_key_file == f"/run/secrets/{name}"  # where Compose mounts a service's secret
    assert compose["secrets"][name] == {"file": "./deploy/api-keys"}
    assert "deploy/api-keys" in (ROOT / ".gitignore").read_text().splitlines()
