"""The DLPack capsules barecuda produces: no Python-level API (see _interop)."""
