"""The two tiers' build-bins scripts, run for real in a sandbox with a fake ``go``.

``tests/e2e/build-bins.sh`` and ``tests/node/build-bins.sh`` share one body
(``tests/build-bins-lib.sh``). A real build takes minutes and the module proxy, so ``go`` here is a
boundary fake written by the test: it records each call (argv and the environment the scripts set)
and leaves an executable file for every package it is asked to build. Everything else is real:
bash, the stamp, the lock, the move into the cache directory under a temporary ``$HOME``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Stands in for the Go tool: ``go env GOVERSION``, ``go build -o DIR/ PKG...`` and
#: ``go install PKG@VERSION...`` (into $GOBIN), recording every call as one JSON line.
FAKE_GO = """\
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_GO_LOG"], "a") as log:
    env = {k: os.environ.get(k) for k in ("GOTOOLCHAIN", "CGO_ENABLED", "GOBIN", "GOFLAGS")}
    log.write(json.dumps({"args": args, "env": env, "cwd": os.getcwd()}) + "\\n")
if args[:2] == ["env", "GOVERSION"]:
    print(os.environ.get("FAKE_GO_VERSION", "go1.26.0"))
    sys.exit(0)
if args[0] == "build":
    i = args.index("-o")
    out, pkgs = args[i + 1], args[i + 2:]
elif args[0] == "install":
    out, pkgs = os.environ["GOBIN"], [a.split("@")[0] for a in args if "@" in a]
else:
    sys.exit(f"fake go: unexpected call {args}")
for pkg in pkgs:
    name = pkg.rstrip("/").rsplit("/", 1)[-1]
    if name in os.environ.get("FAKE_GO_FAIL", "").split():
        sys.exit(f"fake go: {name} does not build")
    path = os.path.join(out, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\\n")
    os.chmod(path, 0o755)
"""


@dataclass(frozen=True)
class GoCall:
    """One recorded call of the fake go."""

    args: list[str]
    env: dict[str, str | None]
    cwd: str


@dataclass(frozen=True)
class Tier:
    """One tier's script, its variables and what it builds."""

    script: str
    bin_var: str
    go_p_var: str
    cache: str
    bins: tuple[str, ...]
    log_prefix: str


E2E = Tier(
    script="tests/e2e/build-bins.sh",
    bin_var="NUMADRA_E2E_BIN",
    go_p_var="NUMADRA_E2E_GO_P",
    cache=".cache/numadra-e2e/bin",
    bins=("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "drakubelet", "kubelet"),
    log_prefix="build-bins: ",
)
NODE = Tier(
    script="tests/node/build-bins.sh",
    bin_var="NUMADRA_NODE_BIN",
    go_p_var="NUMADRA_NODE_GO_P",
    cache=".cache/numadra-node/bin",
    bins=("containerd", "containerd-shim-runc-v2", "ctr", "crictl"),
    log_prefix="node build-bins: ",
)
TIERS = [pytest.param(E2E, id="e2e"), pytest.param(NODE, id="node")]


class Sandbox:
    """A temporary $HOME with the fake go, and a way to run a tier's script in it."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.home.mkdir()
        self.go = root / "fake-go"
        self.go.write_text(f"#!{sys.executable}\n{FAKE_GO}")
        self.go.chmod(0o755)
        self.log = root / "go-calls.jsonl"
        self.no_go = root / "no-go-here"

    def run(self, tier: Tier, *args: str, go: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        """Run the script with only the sandbox's environment (no ambient NUMADRA_* or GO)."""
        base = {
            "HOME": str(self.home),
            "PATH": "/usr/bin:/bin",
            "FAKE_GO_LOG": str(self.log),
            "build_bins_go_fallback": str(self.no_go),
        }
        if go:
            base["GO"] = str(self.go)
        return subprocess.run(
            ["bash", str(REPO / tier.script), *args],
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def calls(self) -> list[GoCall]:
        """Every recorded go call, oldest first; then forget them."""
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        self.log.unlink()
        return [GoCall(**json.loads(line)) for line in lines]

    def builds(self) -> list[list[str]]:
        """The argv of every build/install call (not ``go env``); then forget all calls."""
        return [c.args for c in self.calls() if c.args[0] != "env"]


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


@pytest.mark.parametrize("tier", TIERS)
def test_builds_into_the_home_cache_then_is_up_to_date(sandbox: Sandbox, tier: Tier) -> None:
    first = sandbox.run(tier)
    assert first.returncode == 0, first.stderr
    cache = sandbox.home / tier.cache
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == sorted(tier.bins)
    assert all(os.access(cache / b, os.X_OK) for b in tier.bins)
    assert (cache / ".stamp").read_text().strip()
    assert not list(cache.glob(".build.*")), "the temporary build dir is removed"
    assert f"{tier.log_prefix}built in " in first.stderr
    assert sandbox.builds(), "the first run builds"

    again = sandbox.run(tier)
    assert again.returncode == 0, again.stderr
    assert f"{tier.log_prefix}up to date in {cache} (stamp " in again.stderr
    assert sandbox.builds() == [], "an up-to-date cache builds nothing"

    check = sandbox.run(tier, "--check")
    assert check.returncode == 0, check.stderr
    assert sandbox.builds() == []


@pytest.mark.parametrize("tier", TIERS)
def test_check_on_a_stale_cache_builds_nothing_and_exits_1(sandbox: Sandbox, tier: Tier) -> None:
    out = sandbox.home / "out"
    result = sandbox.run(tier, "--check", **{tier.bin_var: str(out)})
    assert result.returncode == 1
    assert f"{tier.log_prefix}not up to date in {out}" in result.stderr
    assert sandbox.builds() == []
    assert not out.exists(), "--check creates nothing"


@pytest.mark.parametrize("tier", TIERS)
def test_the_stamp_covers_the_go_version_and_force_rebuilds(sandbox: Sandbox, tier: Tier) -> None:
    out = str(sandbox.home / "out")
    assert sandbox.run(tier, **{tier.bin_var: out}).returncode == 0
    stamp = (Path(out) / ".stamp").read_text()
    sandbox.calls()

    assert sandbox.run(tier, "--check", FAKE_GO_VERSION="go1.99.0", **{tier.bin_var: out}).returncode == 1
    assert sandbox.run(tier, FAKE_GO_VERSION="go1.99.0", **{tier.bin_var: out}).returncode == 0
    assert (Path(out) / ".stamp").read_text() != stamp
    assert sandbox.builds(), "a new Go version rebuilds"

    forced = sandbox.run(tier, "--force", FAKE_GO_VERSION="go1.99.0", **{tier.bin_var: out})
    assert forced.returncode == 0, forced.stderr
    assert sandbox.builds(), "--force rebuilds an up-to-date cache"


@pytest.mark.parametrize("tier", TIERS)
def test_without_go_it_says_skip_and_exits_0(sandbox: Sandbox, tier: Tier) -> None:
    out = sandbox.home / "out"
    empty = sandbox.run(tier, go=False, **{tier.bin_var: str(out)})
    assert empty.returncode == 0
    assert f"{tier.log_prefix}SKIP: go not found: skipping build; no binaries in {out}" in empty.stderr

    out.mkdir()
    for b in tier.bins:
        (out / b).write_text("#!/bin/sh\n")
        (out / b).chmod(0o755)
    present = sandbox.run(tier, go=False, **{tier.bin_var: str(out)})
    assert present.returncode == 0
    assert "SKIP: go not found: skipping build; using existing binaries" in present.stderr
    assert sandbox.calls() == []


@pytest.mark.parametrize("tier", TIERS)
def test_a_failed_build_exits_1_and_leaves_no_stamp(sandbox: Sandbox, tier: Tier) -> None:
    out = sandbox.home / "out"
    result = sandbox.run(tier, FAKE_GO_FAIL=tier.bins[-1], **{tier.bin_var: str(out)})
    assert result.returncode == 1
    assert f"{tier.log_prefix}FAILED after " in result.stderr
    assert not (out / ".stamp").exists()
    assert not list(out.glob(".build.*"))


def test_node_stops_at_the_first_failed_install(sandbox: Sandbox) -> None:
    """containerd failing must not let crictl's install decide the exit status."""
    out = sandbox.home / "out"
    result = sandbox.run(NODE, FAKE_GO_FAIL="containerd", NUMADRA_NODE_BIN=str(out))
    assert result.returncode == 1
    assert "FAILED after " in result.stderr
    assert len(sandbox.builds()) == 1


@pytest.mark.parametrize("tier", TIERS)
def test_unknown_argument_exits_2(sandbox: Sandbox, tier: Tier) -> None:
    result = sandbox.run(tier, "--frobnicate")
    assert result.returncode == 2
    assert "build-bins.sh: unknown argument: --frobnicate" in result.stderr


@pytest.mark.parametrize("tier", TIERS)
def test_help_prints_the_script_header(sandbox: Sandbox, tier: Tier) -> None:
    result = sandbox.run(tier, "--help")
    assert result.returncode == 0
    assert f"Usage: {tier.script} [--force] [--check]" in result.stdout
    assert "set -euo" not in result.stdout
    assert sandbox.calls() == []


def test_e2e_builds_the_module_at_its_pinned_version(sandbox: Sandbox) -> None:
    assert sandbox.run(E2E, NUMADRA_E2E_GO_P="5").returncode == 0
    (build,) = [c for c in sandbox.calls() if c.args[0] == "build"]
    args = build.args
    assert args[:6] == ["build", "-mod=readonly", "-p", "5", "-trimpath", "-ldflags"]
    ldflags = args[6]
    assert "-X k8s.io/component-base/version.gitVersion=v1.37.2" in ldflags
    assert "-X k8s.io/component-base/version.gitMinor=37" in ldflags
    assert args[9:] == [
        "./cmd/etcd",
        "./cmd/drakubelet",
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kubelet",
    ]
    assert build.cwd == str(REPO / "tests/e2e/k8s")
    assert build.env == {"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOBIN": None, "GOFLAGS": None}


def test_node_installs_containerd_and_crictl_at_their_versions(sandbox: Sandbox) -> None:
    out = sandbox.home / "out"
    assert sandbox.run(NODE, NUMADRA_NODE_BIN=str(out), GOFLAGS="-mod=vendor").returncode == 0
    containerd, crictl = [c for c in sandbox.calls() if c.args[0] == "install"]
    tags = "no_btrfs no_devmapper no_zfs no_aufs"
    assert containerd.args[:6] == ["install", "-p", "2", "-trimpath", "-tags", tags]
    assert containerd.args[-3:] == [
        "github.com/containerd/containerd/v2/cmd/containerd@v2.4.2",
        "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v2.4.2",
        "github.com/containerd/containerd/v2/cmd/ctr@v2.4.2",
    ]
    assert crictl.args[-1] == "sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0"
    for call in (containerd, crictl):
        env = call.env
        assert env["GOFLAGS"] == "", "the caller's GOFLAGS play no part"
        assert env["GOBIN"] == call.cwd, "go install writes into the temporary build dir"
        assert Path(str(env["GOBIN"])).parent == out
        assert (env["GOTOOLCHAIN"], env["CGO_ENABLED"]) == ("local", "0")
