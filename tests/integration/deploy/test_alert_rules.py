"""The alerting rules of deploy/monitoring load in Prometheus: ``promtool check rules`` accepts them.

A PrometheusRule is only YAML to the apiserver; a bad PromQL expression, template or duration
shows up when the Prometheus Operator hands the rules to Prometheus, which then drops the whole
group. promtool is Prometheus' own parser. Needs promtool (scripts/build-deploy-tools.sh builds it
from its Go module into ~/.cache/numadra-tools/bin); skipped with that reason when it is missing.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "deploy" / "monitoring" / "prometheusrule.yaml"


def _load_render() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_deploy", ROOT / "scripts" / "render_deploy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["render_deploy"] = module
    spec.loader.exec_module(module)
    return module


render = _load_render()
PROMTOOL = render.find_tool("promtool", None)
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not built (run scripts/build-deploy-tools.sh; CI does)"
)


def _rules() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(RULES.read_text()) if doc]


def test_every_prometheus_rule_of_deploy_loads() -> None:
    """promtool parses and checks every rule of deploy/monitoring (each file has at least one alert)."""
    objects = _rules()
    assert [o["kind"] for o in objects] == ["PrometheusRule"]
    assert sum(len(g["rules"]) for o in objects for g in o["spec"]["groups"]) > 0
    assert render.check_alert_rules(PROMTOOL, objects) == []


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        pytest.param("expr", "sum by (node (numadra_devices) > 0", "could not parse expression", id="promql"),
        pytest.param("for", "5 minutes", 'unknown unit " minutes"', id="duration"),
    ],
)
def test_a_broken_rule_is_reported_by_name(field: str, value: str, reason: str) -> None:
    """The check can fail: a broken expression or duration is refused, with promtool's reason."""
    (obj,) = _rules()
    broken = copy.deepcopy(obj)
    broken["spec"]["groups"][0]["rules"][0][field] = value
    (problem,) = render.check_alert_rules(PROMTOOL, [broken])
    assert problem.startswith(f"PrometheusRule {obj['metadata']['name']}: ")
    assert "FAILED" in problem and reason in problem, problem
