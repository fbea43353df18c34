"""The names of the files a prepared claim leaves on the node, in one place.

Prepare writes them (``driver.claims``) and the evidence rebuild finds them again after a journal
loss (``driver.state``), two layers apart. Both read the spelling from here, so a change of layout
cannot leave the rebuild looking for files prepare no longer writes.

* a claim's CDI spec: kind ``<driver>/claim``, file ``<cdi-dir>/<vendor>_claim_<uid>.json``;
* its metadata streams: ``<plugin-dir>/dra-device-metadata/<uid>_<request>.json``.
"""

from __future__ import annotations

__all__ = ["CLAIM_CDI_CLASS", "METADATA_DIR"]

#: the CDI class of the per-claim spec: kind ``<driver>/claim``
CLAIM_CDI_CLASS = "claim"
#: the plugin dir's subdirectory that holds every claim's metadata streams
METADATA_DIR = "dra-device-metadata"
