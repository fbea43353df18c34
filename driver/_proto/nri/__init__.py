"""Generated protobuf messages for the NRI plugin protocol and its ttrpc envelope (do not edit).

Sources: ``api/proto/nri/api.proto`` and ``api/proto/nri/ttrpc.proto``. Regenerate with
``python -m driver._proto.nri.generate``; a unit test fails when these files are stale.
"""
