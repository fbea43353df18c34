"""Kubelet-facing protocol layer: plugin registration, DRA v1/v1beta1 services, health streaming."""
