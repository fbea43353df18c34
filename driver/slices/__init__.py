"""Inventory -> resource.k8s.io/v1 ResourceSlices (pure builder) and the publisher."""
