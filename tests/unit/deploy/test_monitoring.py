"""deploy/monitoring: the Grafana dashboard and the PrometheusRule parse, cover what operators ask,
and name only metrics that a real driver's ``/metrics`` serves.

The names are read from a live :class:`MetricsServer` over loopback (``# TYPE`` lines give every
family, also the labelled ones no event has touched yet), so a renamed or dropped metric fails here
instead of leaving an empty panel or an alert that can never fire.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from driver.observability import Metrics, MetricsServer

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "deploy" / "monitoring"
_METRIC = re.compile(r"\bnumadra_[a-z0-9_]+")
#: sample names a family exposes, by its ``# TYPE``
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((MONITORING / "numadra-dashboard.json").read_text())
    return doc


def _rule() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return doc


def _alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in _rule()["spec"]["groups"] for r in g["rules"]}


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def _served_names() -> set[str]:
    """Every sample name a freshly started driver's /metrics can carry."""
    server = MetricsServer("127.0.0.1:0", {}, Metrics("numadra.dev", "node-a"))
    with server, urllib.request.urlopen(server.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            base = family.removesuffix("_total") if kind == "counter" else family
            names.update(base + suffix for suffix in _SUFFIXES[kind])
    return names


def test_dashboard_is_grafana_json_with_a_query_per_panel() -> None:
    dash = _dashboard()
    assert (dash["uid"], dash["title"]) == ("numadra", "numadra")
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["type"] in {"timeseries", "heatmap", "bargauge", "state-timeline", "stat"}, panel[
            "title"
        ]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "node"}
    assert all('node=~"$node"' in e for e in _dashboard_exprs())  # every panel follows the node picker


def test_dashboard_covers_the_operators_questions() -> None:
    exprs = "\n".join(_dashboard_exprs())
    for needle in (
        "rate(numadra_prepare_total",
        "rate(numadra_unprepare_total",
        'result="error"',
        "histogram_quantile(0.99, sum by (le) (rate(numadra_prepare_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(numadra_unprepare_duration_seconds_bucket",
        "sum by (type, health) (numadra_devices",
        "numadra_cpus_free",
        "numadra_journal_recoveries_total",
        "numadra_state_recoveries_total",
        "rate(numadra_publish_operations_total",
    ):
        assert needle in exprs, needle


def test_prometheus_rule_has_the_alerts_with_severity_and_text() -> None:
    rule = _rule()
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    alerts = _alerts()
    assert {
        "NumadraDeviceUnhealthy",
        "NumadraPrepareErrors",
        "NumadraStateRecovered",
        "NumadraNotRegistered",
        "NumadraPinningFailures",
        "NumadraAdoptedClaimReleased",
        "NumadraApiFeatureMissing",
    } <= set(alerts)
    for name, alert in alerts.items():
        assert alert["labels"]["severity"] in {"info", "warning", "critical"}, name
        assert alert["annotations"]["summary"] and alert["annotations"]["description"], name
        assert re.fullmatch(r"\d+[smh]", alert.get("for", "0m")), name
    assert "numadra_state_recoveries_total" in alerts["NumadraStateRecovered"]["expr"]
    assert "numadra_registered" in alerts["NumadraNotRegistered"]["expr"]
    assert "numadra_pinning_failures_total" in alerts["NumadraPinningFailures"]["expr"]
    assert "numadra_adopted_claim_releases_total" in alerts["NumadraAdoptedClaimReleased"]["expr"]
    assert "numadra_api_fields_dropped" in alerts["NumadraApiFeatureMissing"]["expr"]
    assert "by (node, feature)" in alerts["NumadraApiFeatureMissing"]["expr"]


def test_every_expression_is_balanced() -> None:
    """Brackets balance in every query (a cheap guard: no promtool here)."""
    pairs = {")": "(", "]": "[", "}": "{"}
    for expr in [*_dashboard_exprs(), *(a["expr"] for a in _alerts().values())]:
        stack: list[str] = []
        for ch in expr:
            if ch in "([{":
                stack.append(ch)
            elif ch in pairs:
                assert stack and stack.pop() == pairs[ch], expr
        assert not stack, expr


def test_every_metric_named_is_served_by_the_driver() -> None:
    """Each numadra_* name in the dashboard and the alerts is a sample name of a real /metrics.

    ``numadra_state_recoveries_total`` comes with the journal-recovery work merged next to this
    one; until both are in one tree this test names it as missing.
    """
    served = _served_names()
    assert "numadra_prepare_duration_seconds_bucket" in served and "numadra_registered" in served
    named = {
        m for e in [*_dashboard_exprs(), *(a["expr"] for a in _alerts().values())] for m in _METRIC.findall(e)
    }
    assert len(named) >= 10
    assert sorted(named - served) == []


def test_monitoring_is_opt_in_in_helm_and_kustomize() -> None:
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "numadra" / "values.yaml").read_text())
    assert values["monitoring"] == {"enabled": False}
    base = yaml.safe_load((ROOT / "deploy" / "kustomize" / "base" / "kustomization.yaml").read_text())
    assert "components" not in base and not any("monitoring" in r for r in base["resources"])
    component = ROOT / "deploy" / "kustomize" / "components" / "monitoring" / "kustomization.yaml"
    assert yaml.safe_load(component.read_text())["resources"] == ["../../../monitoring"]
    link = ROOT / "deploy" / "helm" / "numadra" / "files" / "monitoring"
    assert link.is_symlink() and link.resolve() == MONITORING.resolve()
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert kustomization["configMapGenerator"][0]["files"] == ["numadra-dashboard.json"]
    assert kustomization["configMapGenerator"][0]["options"]["labels"]["grafana_dashboard"] == "1"
