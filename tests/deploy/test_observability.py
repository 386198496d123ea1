"""deploy/observability/ and the compose `observability` profile, checked without an engine:
Debian's real `promtool` checks the Prometheus config and the alert rules and runs the rules'
unit tests (alerts_test.yml: each alert fires on trouble and not on a healthy gateway); the
compose services, Grafana's provisioning and the dashboard must agree with each other and with
the gateway (its port, its replicas, its trace flag); every metric an alert names is one the
gateway exports. tests/real_vllm/test_prometheus.py runs the dashboard's queries against a real
Prometheus scraping a real gateway and vLLM.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.deploy.test_manifests import ENTRYPOINT, compose_services, parse_gateway

ROOT = Path(__file__).parents[2]
OBSERVABILITY = ROOT / "deploy" / "observability"
DASHBOARD = OBSERVABILITY / "grafana" / "dashboards" / "vllm-gateway.json"
METRIC = re.compile(r"\b(gateway_[a-z_]+|vllm:[a-z_:]+)")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not installed (apt-get install prometheus; scripts/bootstrap.sh does it)")
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=OBSERVABILITY, timeout=120,
                          check=False)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of the dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(panel["title"], target["expr"]) for panel in panels for target in panel.get("targets", [])]


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load((OBSERVABILITY / "alerts.yml").read_text())["groups"]
            for rule in group["rules"]]


def families(exposition: str) -> set[str]:
    """The metric families a /metrics page declares (`# TYPE name kind`), with their sample names."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, re.MULTILINE):
        names |= {name} | ({name + "_total"} if kind == "counter" else set()) | \
            ({name + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else set())
    return names


def test_promtool_accepts_the_config_and_the_rules():
    config = promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    rules = promtool("check", "rules", "alerts.yml")
    assert rules.returncode == 0 and f"SUCCESS: {len(alert_rules())} rules found" in rules.stdout, rules.stdout


def test_each_alert_fires_on_trouble_and_only_then():
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", (OBSERVABILITY / "alerts_test.yml").read_text()))
    assert tested == {rule["alert"] for rule in alert_rules()}  # every alert has a unit test


def test_the_issue_names_an_alert_for_each_kind_of_trouble():
    expressions = {rule["alert"]: rule["expr"] for rule in alert_rules()}
    assert "gateway_replica_ejections_total" in expressions["GatewayReplicaEjected"]
    assert "gateway_panic_routes_total" in expressions["GatewayPanicRouting"]
    assert 'reason="unreachable"' in expressions["GatewayStateStoreUnreachable"]
    assert "histogram_quantile(0.99" in expressions["GatewayTTFTHigh"]
    assert 'outcome=~"5.."' in expressions["Gateway5xxRate"]
    assert all(rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"]
               for rule in alert_rules())


def test_every_metric_the_alerts_name_is_one_the_gateway_exports(stack):
    """Declared even before anything was counted (a labelled counter with no sample yet); the
    dashboard's queries are run against a live Prometheus in tests/real_vllm/test_prometheus.py."""
    exported = families(httpx.get(stack.url + "/metrics").text)
    named = {m for rule in alert_rules() for m in METRIC.findall(rule["expr"])}
    assert len(named) == 6 and named - exported == set()


def test_the_dashboard_is_well_formed_for_grafana():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "vllm-gateway" and dashboard["templating"] == {"list": []}
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = [(x, y) for p in panels for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
             for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])]
    assert len(cells) == len(set(cells)) and all(x < 24 for x, _ in cells)  # no two panels overlap
    graphs = [p for p in panels if p["type"] != "row"]
    assert all(p["description"] and p["targets"] and p["datasource"]["uid"] == "prometheus" for p in graphs)
    for panel in graphs:
        assert [t["refId"] for t in panel["targets"]] == [chr(65 + i) for i in range(len(panel["targets"]))]
        assert all(t["datasource"]["uid"] == "prometheus" and t["expr"].strip() for t in panel["targets"])
    queries = [expr for _, expr in dashboard_queries()]
    assert any("vllm:" in q for q in queries) and any("gateway_" in q for q in queries)


def test_the_observability_profile_is_wired_to_the_gateway_and_the_replicas(monkeypatch):
    services = compose_services()
    members = {name: s for name, s in services.items() if "observability" in s.get("profiles", [])}
    assert set(members) == {"prometheus", "grafana", "jaeger"}
    gateway = services["gateway"]
    args = parse_gateway([*ENTRYPOINT[1:]], {k: str(v) for k, v in gateway["environment"].items()}, monkeypatch)
    replicas = [urlsplit(url).netloc for url in args.env_upstreams]

    prometheus = members["prometheus"]
    mounts = dict(volume.rsplit(":", 2)[:2] for volume in prometheus["volumes"] if volume.startswith("./"))
    assert mounts == {"./deploy/observability/prometheus.yml": "/etc/prometheus/prometheus.yml",
                      "./deploy/observability/alerts.yml": "/etc/prometheus/alerts.yml"}
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    config = yaml.safe_load((OBSERVABILITY / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]  # beside the config, where the mount puts it
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    assert targets == {"gateway": [f"gateway:{args.port}"], "vllm": replicas}

    grafana = members["grafana"]
    mounts = dict(volume.rsplit(":", 2)[:2] for volume in grafana["volumes"])
    for source in mounts:
        assert (ROOT / source).is_dir(), source
    provider = yaml.safe_load((OBSERVABILITY / "grafana/provisioning/dashboards/dashboards.yml").read_text())
    assert mounts["./deploy/observability/grafana/dashboards"] == provider["providers"][0]["options"]["path"]
    assert mounts["./deploy/observability/grafana/provisioning"] == "/etc/grafana/provisioning"
    assert grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == \
        provider["providers"][0]["options"]["path"] + "/" + DASHBOARD.name
    sources = yaml.safe_load((OBSERVABILITY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    by_uid = {source["uid"]: source for source in sources["datasources"]}
    assert urlsplit(by_uid["prometheus"]["url"]).netloc == "prometheus:9090" and by_uid["prometheus"]["isDefault"]
    assert by_uid["prometheus"]["jsonData"]["timeInterval"] == config["global"]["scrape_interval"]
    assert urlsplit(by_uid["jaeger"]["url"]).netloc == "jaeger:16686"
    assert members["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"


def test_the_headers_trace_endpoint_reaches_jaeger_through_the_gateways_flag(monkeypatch):
    """The header's `COMPOSE_PROFILES=observability OTLP_TRACES_ENDPOINT=…` line: the gateway's
    environment passes it to --otlp-traces-endpoint, and it names the jaeger service's OTLP port."""
    text = (ROOT / "docker-compose.yml").read_text()
    endpoint = re.search(r"COMPOSE_PROFILES=observability OTLP_TRACES_ENDPOINT=(\S+)", text).group(1)
    assert urlsplit(endpoint).netloc == "jaeger:4318" and urlsplit(endpoint).path == "/v1/traces"
    raw = yaml.safe_load(text)["services"]["gateway"]["environment"]
    assert raw["GATEWAY_OTLP_TRACES_ENDPOINT"] == "${OTLP_TRACES_ENDPOINT:-}"
    environment = {k: str(v) for k, v in compose_services()["gateway"]["environment"].items()}
    assert parse_gateway([*ENTRYPOINT[1:]], environment, monkeypatch).otlp_traces_endpoint == ""  # off
    traced = parse_gateway([*ENTRYPOINT[1:]], environment | {"GATEWAY_OTLP_TRACES_ENDPOINT": endpoint}, monkeypatch)
    assert traced.otlp_traces_endpoint == endpoint
