"""Type stubs for barecuda._wait: interruptible and timed waits (C-level API only)."""
