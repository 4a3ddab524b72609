"""Type stubs for barecuda.kernels._opkey: the key of an op call (C-level API only)."""
from typing import TypeVar

__all__ = ["keyed_weight_class"]

_T = TypeVar("_T", bound=type)

def keyed_weight_class(cls: _T) -> _T: ...
