"""Operating numadra: Prometheus metrics and the HTTP health endpoints the DaemonSet probes.

:class:`Metrics` is the small facade the other components call (``observe_prepare``, ...);
:class:`MetricsServer` serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``--metrics-address``.
Both are self-contained: ``numadra run`` creates one of each and hands the facade around.
"""

from __future__ import annotations

from driver.observability.metrics import Metrics, Result
from driver.observability.server import MetricsServer, parse_address

__all__ = ["Metrics", "MetricsServer", "Result", "parse_address"]
