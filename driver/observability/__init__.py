"""Operating numadra: Prometheus metrics and the HTTP health endpoints the DaemonSet probes.

:class:`Metrics` is the small facade the other components call (``observe_prepare``, ...);
:class:`MetricsServer` serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``--metrics-address``;
:class:`MeteredPlugin` feeds the facade from the kubelet's prepare/unprepare calls. ``numadra run``
creates one of each and hands the facade around.

The names are loaded on first use: :mod:`driver.observability.metered` is imported on the plugin
registration path, which must not pay for prometheus.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver.lazy import names_from

if TYPE_CHECKING:
    from driver.observability.address import parse_address
    from driver.observability.metered import MeteredPlugin
    from driver.observability.metrics import Metrics, Result
    from driver.observability.server import MetricsServer
    from driver.observability.updater import MetricsUpdater

__all__ = ["MeteredPlugin", "Metrics", "MetricsServer", "MetricsUpdater", "Result", "parse_address"]

_HOME = {
    "MeteredPlugin": "driver.observability.metered",
    "Metrics": "driver.observability.metrics",
    "Result": "driver.observability.metrics",
    "MetricsServer": "driver.observability.server",
    "MetricsUpdater": "driver.observability.updater",
    "parse_address": "driver.observability.address",
}


__getattr__ = names_from(__name__, _HOME)
