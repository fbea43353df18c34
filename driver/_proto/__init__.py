"""Generated protobuf and gRPC stubs for the kubelet APIs (do not edit; see ``generate.py``).

One flat module per proto file (``dra_v1_pb2``, ``health_v1alpha1_pb2_grpc``...), because the
upstream protos are all named ``api.proto`` and live under paths (``k8s.io``, ``dra-health``) that
are not valid Python package names. Regenerate with ``python -m driver._proto.generate``.
"""
