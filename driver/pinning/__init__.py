"""CPU and memory pinning: pure allocator and enforcement backends (nri, hook, cgroupfs)."""
