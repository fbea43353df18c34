"""Test support shipped with the package (host-tree generator, fakes named as such)."""
