"""networkData IPs from rtnetlink agree with ``ip -j addr`` on a real kernel (a private netns).

The status writer reads a NIC's addresses once per prepared claim; issue 15 moved that from one
``ip`` process per call to an in-process RTM_GETADDR dump. Here both read the same interfaces of a
throwaway network namespace (``unshare -n``, veth pair, addresses of every kind), so the dump must
give what ``ip`` gives: the local address of a point-to-point one, no link-local, no host scope.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

SETUP = [
    "ip link add v0 type veth peer name v1",
    "ip link set v0 up",
    "ip link set v1 up",
    "ip link set lo up",
    "ip addr add 192.0.2.5/24 dev v0",
    "ip addr add 198.51.100.7/32 dev v0",
    "ip addr add 10.0.0.1 peer 10.0.0.2/32 dev v0",
    "ip addr add 2001:db8::5/64 dev v0 nodad",
    "ip addr add 2001:db8:1::9/128 dev v0 nodad",
    "ip addr add fe80::99/64 dev v0 nodad",
    "ip addr add 203.0.113.1/24 dev v0 scope link",
    "ip addr add 192.0.2.77/24 dev lo",
]

CHILD = """
import json, subprocess, sys
from driver.health.netinfo import _ip_command, netlink_ips
for command in sys.argv[1:]:
    subprocess.run(command.split(), check=True)
print(json.dumps({i: [netlink_ips(i), _ip_command(i)] for i in ("v0", "v1", "lo", "absent0")}))
"""


@pytest.fixture(scope="module")
def answers() -> dict[str, list[list[str]]]:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and iproute2")
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", CHILD, *SETUP],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot make a private network namespace here: {done.stderr.strip()[-200:]}")
    return dict(json.loads(done.stdout))


def test_netlink_gives_what_ip_gives(answers: dict[str, list[list[str]]]) -> None:
    """Every interface, including one that does not exist, reads the same both ways."""
    for interface, (netlink, ip) in answers.items():
        assert netlink == ip, interface


def test_the_addresses_a_claim_status_shows(answers: dict[str, list[list[str]]]) -> None:
    """The wanted ones in CIDR form, in the kernel's order; the peer, link and host scope not."""
    assert answers["v0"][0] == [
        "192.0.2.5/24",
        "198.51.100.7/32",
        "10.0.0.1/32",
        "2001:db8:1::9/128",
        "2001:db8::5/64",
    ]
    assert answers["v1"][0] == []  # link-local only
    assert answers["lo"][0] == ["192.0.2.77/24"]  # 127.0.0.1 and ::1 are host scope
    assert answers["absent0"][0] == []
