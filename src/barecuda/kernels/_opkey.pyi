"""Type stubs for barecuda.kernels._opkey: the key of an op call (C-level API only)."""
