"""The kubelet side: plugin registration, DRA v1/v1beta1 services, health streaming, claim layer.

Entry point: :class:`driver.kubelet.server.KubeletPluginServer`, which owns both unix sockets,
reads and checks the claims of each prepare (``claims``) and calls a
:class:`driver.plugin.DriverPlugin` with the fetched claims under the cross-process lock (and
optionally serves a :class:`driver.plugin.HealthSource`), as the Go ``kubeletplugin`` helper does.
Nothing here knows about GPUs, NICs or what an allocation's devices mean: the checks here are the
ones that hold for every driver (references, UID, ``status.allocation``).

Modules: ``paths`` (socket names), ``serialize`` (thread + flock lock), ``translate`` (pure message
conversion and the one check of a call's claim references), ``claims`` (reads, claim checks, the
locked driver call), ``admission`` (call slots) and ``door`` (calls held until attach), both gRPC
server interceptors, ``registration``, ``dra``, ``health`` (the gRPC services) and ``server``.
This ``__init__`` imports none of them, so importing the package does not load grpc.

Error model of NodePrepareResources / NodeUnprepareResources: a bad claim reference, a claim that
cannot be read or fails the claim checks, or a claim the driver failed is a per-claim ``error``
entry; an exception raised by the driver is gRPC ``INTERNAL`` with
``"<method>: driver failed: <Type>: <text>"`` (the kubelet ignores the response and retries).
"""
