"""The apiserver loops' retry policy, under the name they have always imported it by.

The policy itself lives in :mod:`driver.backoff`, below every layer that runs a loop, because the
thread supervisor (:mod:`driver.supervise`) paces its restarts with it too and sits under
``driver.worker``, which ``driver.kube`` uses.
"""

from __future__ import annotations

from driver.backoff import Backoff, RetryPolicy

__all__ = ["Backoff", "RetryPolicy"]
