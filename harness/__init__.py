"""numadra's development harness: the other side of its boundaries, for tests, benches and scripts.

Generated host trees (``hostspec``, ``hosttree``, ``topologies``, ``synthetic``), a kubelet
(``kubeletclient``), an apiserver (``fakeapiserver``; the real control plane in ``controlplane``),
a container runtime's NRI side (``fake_nri_runtime``), waiting helpers (``poll``) and a headless
browser for pictures (``chromium``). Each fake is named as such; none is used by ``driver/``.

It lives outside ``tests/`` because bench/ and scripts/ use it too, and outside ``driver/``
because it is no part of the product: neither the wheel nor the image carries it (only
``driver`` and ``cdi`` are packaged). Fakes that only tests use stay in ``tests/support``.
"""
