"""The kubelet layer's read-ahead: called for exactly the plugins ``isinstance(p, ReadsAhead)`` names.

The layer asks once per plugin whether it reads ahead without the runtime-checkable protocol's
class checks; these tests hold it to the protocol's own answer, shape by shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from driver.kubelet import claims as claim_layer
from driver.kubelet.claims import ClaimFetcher
from driver.observability.metered import MeteredPlugin
from driver.plugin import Claim, ClaimRef, ReadsAhead
from tests.support.fakeplugin import FakePlugin, StubClaims


class _WithMethod(FakePlugin):
    """Reads ahead: notes the claim UIDs it was told about."""

    def __init__(self) -> None:
        super().__init__()
        self.ahead: list[tuple[str, ...]] = []

    def read_ahead(self, claims: Sequence[Claim]) -> None:
        self.ahead.append(tuple(c.ref.uid for c in claims))


class _BlockedMethod(_WithMethod):
    """A subclass that blocks the method, as the protocol allows: ``read_ahead = None``."""

    read_ahead = None  # type: ignore[assignment]


class _OnInstance(FakePlugin):
    """A plugin whose ``read_ahead`` is an attribute of the instance, not of its class."""

    def __init__(self) -> None:
        super().__init__()
        self.ahead: list[tuple[str, ...]] = []
        self.read_ahead = lambda claims: self.ahead.append(tuple(c.ref.uid for c in claims))


def _shapes() -> list[FakePlugin]:
    return [FakePlugin(), _WithMethod(), _BlockedMethod(), _OnInstance()]


@pytest.mark.parametrize("plugin", _shapes(), ids=lambda p: type(p).__name__)
def test_the_kubelet_layer_reads_ahead_exactly_for_a_reads_ahead_plugin(plugin: FakePlugin) -> None:
    """prepare calls read_ahead once with the call's claims when the protocol says the plugin has
    one, and never otherwise (a blocked method included)."""
    ref = ClaimRef("ns", "c", "5f2c8a9e-0d1b-4c3a-9e8f-000000000001")
    fetcher = ClaimFetcher(StubClaims([ref]))
    try:
        results = claim_layer.prepare(plugin, fetcher, None, [ref])
    finally:
        fetcher.close()
    assert results[ref.uid].ok
    ahead = getattr(plugin, "ahead", [])
    assert ahead == ([(ref.uid,)] if isinstance(plugin, ReadsAhead) else [])


@pytest.mark.parametrize("plugin", _shapes(), ids=lambda p: type(p).__name__)
def test_the_metered_plugin_forwards_read_ahead_exactly_to_a_reads_ahead_plugin(plugin: FakePlugin) -> None:
    """The wrapper decides once, at construction, with the protocol's rule."""
    claims = [Claim(ClaimRef("ns", "c", "ok-1"), {})]
    MeteredPlugin(plugin, lambda: None).read_ahead(claims)
    assert getattr(plugin, "ahead", []) == ([("ok-1",)] if isinstance(plugin, ReadsAhead) else [])
