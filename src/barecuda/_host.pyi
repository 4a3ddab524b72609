__all__ = ["PinnedBuffer", "PinnedAllocator", "pinned_empty", "register_host", "HostRegistration"]

from typing_extensions import deprecated
import sys
from typing import final, Any, Optional, Tuple, Union

from barecuda._device import Device
from barecuda._stream import Stream
from barecuda._device import _DeviceLike
from barecuda._buffer import _Memory
from barecuda._dtype import _Shape
from barecuda._stream import _StreamLike


class PinnedAllocator:
    @property
    def device(self) -> Device: ...

@final
class PinnedBuffer(_Memory):
    def __new__(cls, nbytes: int, *, device: _DeviceLike = None, portable: bool = True,
                 mapped: bool = False, write_combined: bool = False) -> "PinnedBuffer": ...
    @property
    def mapped(self) -> bool: ...
    @property
    def device_ptr(self) -> int: ...
    @property
    def is_closed(self) -> bool: ...
    @property
    @deprecated("use PinnedBuffer.is_closed")
    def closed(self) -> bool: ...
    def __len__(self) -> int: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int) -> memoryview: ...
    def __enter__(self) -> PinnedBuffer: ...

def pinned_empty(shape: _Shape, dtype: Any = "uint8", *, device: _DeviceLike = None, portable: bool = True,
                 mapped: bool = False, write_combined: bool = False) -> Any: ...

@final
class HostRegistration(_Memory):
    @property
    def device_ptr(self) -> int: ...
    def __enter__(self) -> HostRegistration: ...

def register_host(obj: Any, *, device: _DeviceLike = None, portable: bool = True, mapped: bool = False,
                  read_only: bool = False) -> HostRegistration: ...
