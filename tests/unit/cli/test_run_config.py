"""``numadra run`` flags and environment -> RunConfig, and the one-line usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from driver import defaults
from driver.cli import EXIT_OK, EXIT_USAGE, build_parser, main
from driver.cli.run import OPTIONS, config_from_args
from driver.config import RunConfig
from driver.errors import ConfigError
from driver.health.taints import TAINT_EFFECTS
from driver.pinning.aux import AuxCpus
from driver.pinning.backend import PinningKind

_KUBECONFIG: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _kubeconfig(tmp_path: Path) -> None:
    """Every config needs cluster access: a kubeconfig file that exists (its content is not read)."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    _KUBECONFIG["KUBECONFIG"] = str(path)


def _config(argv: list[str], env: dict[str, str] | None = None) -> RunConfig:
    args = build_parser().parse_args(["run", *argv])
    return config_from_args(args, {**_KUBECONFIG, **(env or {})})


def test_defaults_follow_the_design_contract(tmp_path: Path) -> None:
    """Without flags or env: kubelet's standard dirs, plugin dir under the driver name, no pinning."""
    cfg = _config([], {"NODE_NAME": "node-1"})
    assert cfg.node_name == "node-1"
    assert cfg.driver_name == "numadra.dev"
    assert cfg.registrar_dir == Path("/var/lib/kubelet/plugins_registry")
    assert cfg.effective_plugin_dir == Path("/var/lib/kubelet/plugins/numadra.dev")
    assert cfg.cdi_dir == Path("/var/run/cdi")
    assert cfg.kubeconfig == _KUBECONFIG["KUBECONFIG"]
    assert cfg.pod_uid is None
    assert cfg.pinning is PinningKind.OFF
    assert cfg.metrics_address == ""
    assert cfg.taint_unhealthy == "NoSchedule"
    assert cfg.claim_status is True
    assert cfg.claim_read_timeout == 10.0


def test_plugin_dir_default_follows_the_driver_name() -> None:
    """--driver-name moves the default plugin dir with it (the kubelet expects <plugins>/<driver>)."""
    cfg = _config(["--node-name", "n", "--driver-name", "other.example.com"])
    assert cfg.effective_plugin_dir == Path("/var/lib/kubelet/plugins/other.example.com")


@pytest.mark.parametrize(
    ("env", "field", "expected"),
    [
        pytest.param({"POD_UID": "abc-123"}, "pod_uid", "abc-123", id="POD_UID"),
        pytest.param({"NUMADRA_PINNING": "nri"}, "pinning", PinningKind.NRI, id="pinning"),
        pytest.param({"NUMADRA_LOG_FORMAT": "json"}, "log_format", "json", id="log-format"),
        pytest.param({"NUMADRA_LOG_LEVEL": "debug"}, "log_level", "debug", id="log-level"),
        pytest.param({"NUMADRA_CDI_DIR": "/x/cdi"}, "cdi_dir", Path("/x/cdi"), id="cdi-dir"),
        pytest.param(
            {"NUMADRA_RESERVED_CPUS": "0-1,4"}, "reserved_cpus", frozenset({0, 1, 4}), id="reserved"
        ),
        pytest.param({"NUMADRA_NODE_ALLOCATABLE": "true"}, "node_allocatable", True, id="node-allocatable"),
        pytest.param({"NUMADRA_TAINT_UNHEALTHY": "none"}, "taint_unhealthy", "none", id="taint"),
        pytest.param({"NUMADRA_HEALTH_INTERVAL": "0.5"}, "health_interval", 0.5, id="health-interval"),
        pytest.param({"NUMADRA_RESCAN_INTERVAL": "0"}, "rescan_interval", 0.0, id="rescan-off"),
        pytest.param({"NUMADRA_CLAIM_STATUS": "off"}, "claim_status", False, id="claim-status"),
        pytest.param(
            {"NUMADRA_CLAIM_READ_TIMEOUT": "2.5"}, "claim_read_timeout", 2.5, id="claim-read-timeout"
        ),
        pytest.param({"NUMADRA_METRICS_ADDRESS": ":8080"}, "metrics_address", ":8080", id="metrics"),
        pytest.param(
            {"NUMADRA_NODE_ALLOCATABLE": "true", "NUMADRA_AUX_CPUS": "gpu=2,nic=1"},
            "aux_cpus",
            AuxCpus(gpu=2, nic=1),
            id="aux-cpus",
        ),
    ],
)
def test_environment_sets_what_no_flag_sets(env: dict[str, str], field: str, expected: object) -> None:
    """Each option falls back to its environment variable."""
    cfg = _config(["--node-name", "n"], env)
    assert getattr(cfg, field) == expected


@pytest.mark.parametrize(
    ("argv", "env", "field", "expected"),
    [
        pytest.param(
            ["--pinning", "hook"], {"NUMADRA_PINNING": "nri"}, "pinning", PinningKind.HOOK, id="choice"
        ),
        pytest.param(["--node-name", "a"], {"NODE_NAME": "b"}, "node_name", "a", id="NODE_NAME"),
        pytest.param(
            ["--no-node-allocatable"], {"NUMADRA_NODE_ALLOCATABLE": "1"}, "node_allocatable", False, id="bool"
        ),
        pytest.param(["--pod-uid", "x"], {"POD_UID": "y"}, "pod_uid", "x", id="POD_UID"),
    ],
)
def test_a_flag_beats_its_environment_variable(
    argv: list[str], env: dict[str, str], field: str, expected: object
) -> None:
    """The command line wins over the environment."""
    cfg = _config(["--node-name", "n", *argv] if "--node-name" not in argv else argv, env)
    assert getattr(cfg, field) == expected


@pytest.mark.parametrize(
    ("argv", "env", "names"),
    [
        pytest.param([], {"NUMADRA_PINNING": "bogus"}, ("--pinning", "NUMADRA_PINNING"), id="pinning-env"),
        pytest.param(["--log-format", "xml"], {}, ("--log-format", "json|console"), id="log-format"),
        pytest.param([], {"NUMADRA_NODE_ALLOCATABLE": "maybe"}, ("NUMADRA_NODE_ALLOCATABLE",), id="bool-env"),
        pytest.param(["--reserved-cpus", "3-1"], {}, ("--reserved-cpus",), id="reserved-cpus"),
        pytest.param([], {"NODE_NAME": "Not_A_Node"}, ("--node-name", "NODE_NAME"), id="node-name"),
        pytest.param(["--driver-name=Bad_Name"], {}, ("--driver-name",), id="driver-name"),
        pytest.param(["--metrics-address", "nope"], {}, ("metrics address",), id="metrics-address"),
        pytest.param(["--health-interval", "0"], {}, ("--health-interval",), id="health-zero"),
        pytest.param(["--rescan-interval", "-1"], {}, ("--rescan-interval",), id="rescan-negative"),
        pytest.param(["--health-interval", "soon"], {}, ("--health-interval",), id="health-text"),
        pytest.param(["--host-root", "/does/not/exist"], {}, ("--host-root",), id="host-root"),
        pytest.param([], {"NUMADRA_TAINT_UNHEALTHY": "Evict"}, ("NUMADRA_TAINT_UNHEALTHY",), id="taint-env"),
        pytest.param(["--hook-path", "bin/numadra"], {}, ("--hook-path",), id="hook-path-relative"),
        pytest.param(["--claim-read-timeout", "0"], {}, ("--claim-read-timeout",), id="read-timeout-zero"),
        pytest.param(
            ["--aux-cpus", "gpu=2"], {}, ("--aux-cpus", "needs --node-allocatable"), id="aux-without-gate"
        ),
        pytest.param(
            ["--node-allocatable", "--aux-cpus", "gpu=many"], {}, ("--aux-cpus", "gpu=many"), id="aux-junk"
        ),
        pytest.param(
            [],
            {"NUMADRA_CLAIM_READ_TIMEOUT": "45"},
            ("NUMADRA_CLAIM_READ_TIMEOUT", "45 s"),
            id="read-timeout-long",
        ),
    ],
)
def test_bad_values_are_config_errors_naming_the_option(
    argv: list[str], env: dict[str, str], names: tuple[str, ...]
) -> None:
    """Flags and env values get the same checks; the message names what to fix, on one line."""
    full_env = {"NODE_NAME": "n", **env}
    with pytest.raises(ConfigError) as info:
        _config(argv, full_env)
    message = str(info.value)
    assert "\n" not in message
    for name in names:
        assert name in message


def test_numadra_kubeconfig_wins_over_kubeconfig(tmp_path: Path) -> None:
    """NUMADRA_KUBECONFIG first, then the conventional KUBECONFIG."""
    mine = tmp_path / "mine"
    mine.write_text("")
    assert _config(["--node-name", "n"], {"NUMADRA_KUBECONFIG": str(mine)}).kubeconfig == str(mine)
    assert _config(["--node-name", "n"]).kubeconfig == _KUBECONFIG["KUBECONFIG"]


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        pytest.param({"KUBECONFIG": "/no/such/kubeconfig"}, "/no/such/kubeconfig", id="missing-file"),
        pytest.param({"KUBECONFIG": ""}, "not in a pod", id="no-cluster"),
    ],
)
def test_cluster_access_is_checked_at_start(env: dict[str, str], needle: str) -> None:
    """A missing kubeconfig, or none outside a pod, is a usage error now, not a dead thread later."""
    args = build_parser().parse_args(["run", "--node-name", "n"])
    with pytest.raises(ConfigError, match=needle):
        config_from_args(args, env)


def test_unknown_flag_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse errors keep the CLI contract: exit code 2 and a single line on stderr."""
    with pytest.raises(SystemExit) as info:
        main(["run", "--no-such-flag"])
    assert info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--no-such-flag" in err


def _run_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == EXIT_OK
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def test_every_option_has_an_environment_variable(capsys: pytest.CaptureFixture[str]) -> None:
    """Documented names for NODE_NAME and POD_UID, NUMADRA_<FLAG> for everything else (and
    KUBECONFIG after NUMADRA_KUBECONFIG), all shown in --help."""
    documented = {"--node-name": ("NODE_NAME",), "--pod-uid": ("POD_UID",)}
    documented["--kubeconfig"] = ("NUMADRA_KUBECONFIG", "KUBECONFIG")
    help_text = _run_help(capsys)
    for option in OPTIONS:
        expected = documented.get(option.flag, ("NUMADRA_" + option.flag[2:].replace("-", "_").upper(),))
        assert option.variables == expected
        assert f"[env {', '.join(expected)}]" in help_text


def test_help_shows_the_defaults_the_config_gets(capsys: pytest.CaptureFixture[str]) -> None:
    """What --help calls the default is what a RunConfig built without flags holds."""
    help_text = _run_help(capsys)
    cfg = _config([], {"NODE_NAME": "n", "KUBECONFIG": _KUBECONFIG["KUBECONFIG"]})
    shown = {
        "--driver-name": cfg.driver_name,
        "--host-root": str(cfg.host_root),
        "--cdi-dir": str(cfg.cdi_dir),
        "--registrar-dir": str(cfg.registrar_dir),
        "--pinning": cfg.pinning.value,
        "--log-format": cfg.log_format,
        "--isolated-cpus": cfg.isolated_cpus,
        "--taint-unhealthy": cfg.taint_unhealthy,
        "--nri-socket": str(cfg.nri_socket),
        "--health-interval": f"{cfg.health_interval:g}",
        "--rescan-interval": f"{cfg.rescan_interval:g}",
        "--hotplug": cfg.hotplug,
        "--hook-path": cfg.hook_path,
        "--claim-read-timeout": f"{cfg.claim_read_timeout:g}",
    }
    for flag, value in shown.items():
        option = next(o for o in OPTIONS if o.flag == flag)
        assert f"{option.help} [env {', '.join(option.variables)}] (default {value})" in help_text
    assert cfg.effective_plugin_dir == defaults.PLUGINS_DIR / cfg.driver_name
    assert f"(default {defaults.PLUGINS_DIR}/<driver>)" in help_text


def test_choices_match_the_components_vocabulary() -> None:
    """The CLI offers exactly the values the pinning backends and the taint code accept."""
    choices = {o.flag: set(o.choices) for o in OPTIONS}
    assert choices["--pinning"] == {k.value for k in PinningKind}
    assert choices["--taint-unhealthy"] == set(TAINT_EFFECTS)


def test_config_and_the_plugins_wrappers_load_no_prometheus(tmp_path: Path) -> None:
    """Prometheus is imported after registration: checking the flags and building the wrappers the
    kubelet server calls must not pull it in (it costs about 0.1 s of the registration budget)."""
    code = (
        "import sys\n"
        "from driver.cli import build_parser\n"
        "from driver.cli.run import config_from_args\n"
        "import driver.observability.metered, driver.state.index, driver.claims.statusqueue\n"
        f"args = build_parser().parse_args(['run', '--node-name', 'n', '--metrics-address', ':9400',"
        f" '--kubeconfig', {_KUBECONFIG['KUBECONFIG']!r}])\n"
        "config_from_args(args, {})\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
