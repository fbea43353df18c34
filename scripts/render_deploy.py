#!/usr/bin/env python3
"""Render deploy/ with kustomize and with Helm and check that both give the same objects.

Variants compared (kustomize target  <->  helm values):
  base      deploy/kustomize/base              <-> defaults
  cgroupfs  deploy/kustomize/overlays/cgroupfs <-> --set pinning.backend=cgroupfs
  list-claims deploy/kustomize/overlays/list-claims <-> --set rbac.listClaims=true
  no-extended-resources deploy/kustomize/overlays/no-extended-resources
            <-> --set deviceClasses.<vendor>.extendedResourceName= for every GPU vendor class
  monitoring deploy/kustomize/overlays/monitoring <-> --set monitoring.enabled=true
  no-gpus   deploy/kustomize/overlays/no-gpus  <-> --set devices={nic,cpu,memory}

Helm renders with release "numadra" in namespace "numadra-system", the names the kustomize base
hard-codes. Before comparing, objects are sorted by (apiVersion, kind, namespace, name) and the
labels only Helm adds (helm.sh/chart, app.kubernetes.io/managed-by, app.kubernetes.io/version) are
dropped; everything else must be equal, list order included.

Then every PrometheusRule of the monitoring variant must load: its ``spec`` is a Prometheus rules
file, which ``promtool check rules`` parses and type-checks (PromQL, templates, durations) as
Prometheus would when the operator hands it over.

Usage: render_deploy.py [--tools-dir DIR] [--out DIR]
Exit codes: 0 identical and the rules load, 1 different (a unified diff is printed) or a rule that
does not load (promtool's message), 3 kustomize/helm/promtool not found.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RELEASE = "numadra"
NAMESPACE = "numadra-system"
KUBE_VERSION = "1.37.0"
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version")
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "base": ("deploy/kustomize/base", ()),
    "cgroupfs": ("deploy/kustomize/overlays/cgroupfs", ("--set", "pinning.backend=cgroupfs")),
    "list-claims": ("deploy/kustomize/overlays/list-claims", ("--set", "rbac.listClaims=true")),
    "read-pods": ("deploy/kustomize/overlays/read-pods", ("--set", "rbac.readPods=true")),
    "no-extended-resources": (
        "deploy/kustomize/overlays/no-extended-resources",
        tuple(
            arg
            for key in ("nvidiaGpu", "amdGpu", "intelI915Gpu", "intelXeGpu")
            for arg in ("--set", f"deviceClasses.{key}.extendedResourceName=")
        ),
    ),
    "monitoring": ("deploy/kustomize/overlays/monitoring", ("--set", "monitoring.enabled=true")),
    "no-gpus": ("deploy/kustomize/overlays/no-gpus", ("--set", "devices={nic,cpu,memory}")),
}


def find_tool(name: str, tools_dir: Path | None) -> str | None:
    """The tool from --tools-dir / $NUMADRA_TOOLS_DIR/bin / ~/.cache/numadra-tools/bin, else PATH."""
    dirs = [tools_dir] if tools_dir else []
    env_dir = os.environ.get("NUMADRA_TOOLS_DIR")
    dirs += [Path(env_dir) / "bin"] if env_dir else []
    dirs.append(Path.home() / ".cache" / "numadra-tools" / "bin")
    for d in dirs:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    return shutil.which(name)


def render_kustomize(kustomize: str, target: str) -> str:
    return subprocess.run(
        [kustomize, "build", str(ROOT / target)], check=True, capture_output=True, text=True
    ).stdout


def render_helm(helm: str, extra: tuple[str, ...]) -> str:
    # --kube-version: a helm built with `go install` has no version stamped in and assumes 1.20
    cmd = [helm, "template", RELEASE, str(ROOT / "deploy/helm/numadra"), "--namespace", NAMESPACE,
           "--kube-version", KUBE_VERSION, *extra]  # fmt: skip
    env = dict(
        os.environ, HELM_CACHE_HOME="/tmp/numadra-helm/cache", HELM_CONFIG_HOME="/tmp/numadra-helm/config"
    )
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout


def normalize(text: str) -> list[dict[str, Any]]:
    """Parsed objects, Helm-only labels dropped, sorted by identity."""
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    for obj in objects:
        labels = obj.get("metadata", {}).get("labels")
        if isinstance(labels, dict):
            for key in HELM_ONLY_LABELS:
                labels.pop(key, None)
    return sorted(
        objects,
        key=lambda o: (
            o.get("apiVersion", ""),
            o.get("kind", ""),
            o.get("metadata", {}).get("namespace", ""),
            o.get("metadata", {}).get("name", ""),
        ),
    )


def dump(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=True, default_flow_style=False)


def compare(kustomize: str, helm: str, out: Path | None) -> list[str]:
    """Names of the variants that differ; diffs go to stdout."""
    different = []
    for variant, (target, helm_args) in VARIANTS.items():
        left = dump(normalize(render_kustomize(kustomize, target)))
        right = dump(normalize(render_helm(helm, helm_args)))
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{variant}.kustomize.yaml").write_text(left)
            (out / f"{variant}.helm.yaml").write_text(right)
        if left != right:
            different.append(variant)
            sys.stdout.writelines(
                difflib.unified_diff(
                    left.splitlines(True), right.splitlines(True), f"kustomize/{variant}", f"helm/{variant}"
                )
            )
    return different


def check_alert_rules(promtool: str, objects: list[dict[str, Any]]) -> list[str]:
    """promtool's complaint about each PrometheusRule in ``objects`` whose rules do not load."""
    problems = []
    for obj in objects:
        if obj.get("kind") != "PrometheusRule":
            continue
        name = obj.get("metadata", {}).get("name", "?")
        with tempfile.TemporaryDirectory(prefix="numadra-rules-") as tmp:
            rules = Path(tmp) / f"{name}.rules.yaml"
            rules.write_text(yaml.safe_dump(obj.get("spec") or {}, sort_keys=False))
            command = [promtool, "check", "rules", str(rules)]
            done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            problems.append(f"PrometheusRule {name}: {(done.stdout + done.stderr).strip()}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools-dir", type=Path, help="directory holding kustomize and helm")
    parser.add_argument("--out", type=Path, help="write the normalized renderings here")
    args = parser.parse_args()
    kustomize, helm = find_tool("kustomize", args.tools_dir), find_tool("helm", args.tools_dir)
    promtool = find_tool("promtool", args.tools_dir)
    if kustomize is None or helm is None or promtool is None:
        print(
            "render_deploy: kustomize, helm or promtool not found "
            "(scripts/build-deploy-tools.sh builds them)",
            file=sys.stderr,
        )
        return 3
    try:
        different = compare(kustomize, helm, args.out)
        monitoring = normalize(render_kustomize(kustomize, VARIANTS["monitoring"][0]))
    except subprocess.CalledProcessError as exc:
        print(f"render_deploy: {' '.join(exc.cmd)} failed:\n{exc.stderr}", file=sys.stderr)
        return 1
    if different:
        print(f"render_deploy: kustomize and helm differ for: {', '.join(different)}", file=sys.stderr)
        return 1
    print(f"render_deploy: kustomize and helm render the same objects ({', '.join(VARIANTS)})")
    problems = check_alert_rules(promtool, monitoring)
    if problems:
        print("render_deploy: alerting rules that do not load:\n" + "\n".join(problems), file=sys.stderr)
        return 1
    rules = sum(1 for o in monitoring if o.get("kind") == "PrometheusRule")
    print(f"render_deploy: promtool loads the {rules} PrometheusRule(s) of the monitoring variant")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
