"""Parsing of ``ip -j addr`` output into networkData IPs."""

from __future__ import annotations

import json

from driver.health.netinfo import host_ip_source, ips_from_ip_json


def test_global_addresses_in_cidr_form() -> None:
    """Global IPv4/IPv6 addresses come out as CIDR; link-local and host scope are skipped."""
    text = json.dumps(
        [
            {
                "ifname": "eth0",
                "addr_info": [
                    {"family": "inet", "local": "192.0.2.5", "prefixlen": 24, "scope": "global"},
                    {"family": "inet6", "local": "2001:db8::5", "prefixlen": 64, "scope": "global"},
                    {"family": "inet6", "local": "fe80::1", "prefixlen": 64, "scope": "link"},
                    {"family": "inet", "local": "127.0.0.1", "prefixlen": 8, "scope": "host"},
                ],
            }
        ]
    )
    assert ips_from_ip_json(text) == ["192.0.2.5/24", "2001:db8::5/64"]


def test_empty_output() -> None:
    """No links means no addresses."""
    assert ips_from_ip_json("") == []


def test_fixture_root_has_no_kernel_addresses(tmp_path: object) -> None:
    """A fixture host root never reports this machine's addresses."""
    assert list(host_ip_source(str(tmp_path))("lo")) == []


def test_real_host_loopback_has_no_global_address() -> None:
    """On the real host, lo's addresses are host-scope and are left out."""
    assert list(host_ip_source("/")("lo")) == []
