"""Test doubles and fixtures that only the tests use; never shipped.

* ``fakeplugin``: ``FakePlugin``, a double of the claims logic (``driver.claims.ClaimsDriver``)
  behind the kubelet layer, and ``StubClaims``, a double of the apiserver's claim reads;
* ``connectproxy``: a real HTTP ``CONNECT`` proxy on loopback, standing in for a node's egress
  proxy;
* ``oneshot``: ``OneShotServer``, a double of an apiserver at the socket that answers each
  connection with bytes the test chose (the transport's tests);
* ``planted``: fixtures that put what an attacker or an accident leaves (FIFOs, sockets, links,
  sparse files) at the paths numadra reads.

Neither the wheel nor the image carries anything under ``tests/``: only ``driver`` and ``cdi`` are
packaged (``[tool.setuptools.packages.find]``; ``tests/integration/packaging/test_wheel.py``
checks the wheel). Doubles that benches and scripts use too live in ``harness/``.
"""
