"""Type stubs for barecuda._libopen: opening a library and filling its table (C-level API only)."""
