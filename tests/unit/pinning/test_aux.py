"""``--aux-cpus``: the per-kind counts and their flag text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.errors import ConfigError
from driver.inventory.model import DeviceKind
from driver.pinning.aux import MAX_AUX_CPUS, NO_AUX_CPUS, AuxCpus


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("", NO_AUX_CPUS, id="empty"),
        pytest.param("gpu=2", AuxCpus(gpu=2), id="gpu"),
        pytest.param(" nic=1 , GPU=4 ", AuxCpus(gpu=4, nic=1), id="spaces-and-case"),
        pytest.param("gpu=0,nic=0", NO_AUX_CPUS, id="zeros"),
    ],
)
def test_parse(text: str, want: AuxCpus) -> None:
    """Either kind, in any order, upper or lower case."""
    assert AuxCpus.parse(text) == want


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("gpu", id="no-count"),
        pytest.param("cpu=2", id="cpu-is-not-a-device-with-aux"),
        pytest.param("gpu=-1", id="negative"),
        pytest.param("gpu=1.5", id="fraction"),
        pytest.param("gpu=²", id="unicode-digit"),
        pytest.param(f"gpu={MAX_AUX_CPUS + 1}", id="above-bound"),
        pytest.param("gpu=1,gpu=2", id="twice"),
    ],
)
def test_parse_refuses_with_the_flag_named(text: str) -> None:
    """A bad value is a ConfigError naming the option and the text."""
    with pytest.raises(ConfigError, match=r"--aux-cpus"):
        AuxCpus.parse(text)


@given(st.integers(0, MAX_AUX_CPUS), st.integers(0, MAX_AUX_CPUS))
def test_the_flag_text_reads_back(gpu: int, nic: int) -> None:
    """str() is the flag text: parsing it gives the same counts."""
    aux = AuxCpus(gpu=gpu, nic=nic)
    assert AuxCpus.parse(str(aux)) == aux
    assert bool(aux) == (gpu > 0 or nic > 0)
    assert aux.of(DeviceKind.CPU) == 0
    assert aux.of(DeviceKind.MEMORY) == 0
