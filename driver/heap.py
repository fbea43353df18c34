"""Keep Python's cyclic garbage collector off the prepare path's tail latency.

After start-up the process holds tens of thousands of long-lived objects (grpc, the kubernetes
client, protobuf descriptors, structlog). Every full collection walks all of them, and lands
inside whichever prepare happened to allocate the object that crossed the threshold. None of them
will ever be garbage, so once start-up is done we move them to the permanent generation
(:func:`gc.freeze`); collections then walk only what was made since, and nothing else about
garbage collection changes. ``bench/prepare.py`` freezes the heap as ``numadra run`` does.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_heap"]


def freeze_startup_heap() -> int:
    """Collect once, then exempt every object alive now from later collections; how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
