"""Type stubs for barecuda._pack: argument packing off the fast path (no Python API)."""
