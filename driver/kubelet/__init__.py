"""Kubelet-facing protocol layer: plugin registration, DRA v1/v1beta1 services, health streaming.

Entry point: :class:`driver.kubelet.server.KubeletPluginServer`, which owns both unix sockets and
calls a :class:`driver.plugin.DriverPlugin` (and optionally a :class:`driver.plugin.HealthSource`).
Nothing here knows about GPUs, NICs or claims; this package only speaks the kubelet's protocols.

Modules: ``paths`` (socket names), ``serialize`` (thread + flock lock), ``translate`` (pure message
conversion and protocol-level checks), ``registration``, ``dra``, ``health`` (the gRPC services)
and ``server``. This ``__init__`` imports none of them, so importing the package does not load
grpc.

Error model of NodePrepareResources / NodeUnprepareResources: a bad claim reference or a failed
claim is a per-claim ``error`` entry; an exception raised by the driver is gRPC ``INTERNAL`` with
``"<method>: driver failed: <Type>: <text>"`` (the kubelet ignores the response and retries).
"""
