"""numadra's development harness: test doubles and fixtures for tests, benches and scripts; never shipped.

Test doubles, each standing in for a real thing that cannot run here (each module's docstring
says which):

* ``fakeapiserver``: a fake kube-apiserver (plain HTTP, objects in memory); ``fake_tls_api``: a
  fake apiserver over real TLS, for the transport;
* ``kubeletclient``: the kubelet's side of the plugin protocols (registration, DRA, health);
* ``fake_nri_runtime``: a container runtime's side of NRI;
* ``nvidia``: stand-ins for an NVIDIA node's user space and the Container Toolkit's CDI spec.

Fixtures: host trees generated from compact descriptions (``hostspec``, ``hosttree``,
``topologies``) in place of a real host's ``sys/``, ``proc/`` and ``dev/``, and synthetic CPU
topologies (``synthetic``). Not doubles: launchers of real programs (``controlplane``: the
Kubernetes control plane; ``chromium``: a browser for the pictures) and waiting helpers
(``poll``). Nothing in ``driver/`` or ``cdi/`` imports any of it.

It lives outside ``tests/`` because bench/ and scripts/ use it too, and outside ``driver/``
because it is no part of the product: neither the wheel nor the image carries it (only
``driver`` and ``cdi`` are packaged). Doubles that only tests use stay in ``tests/support``.
"""
