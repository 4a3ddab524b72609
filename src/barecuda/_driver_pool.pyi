__all__ = ["DriverAllocator", "DriverMemoryPool"]

from typing_extensions import deprecated
from typing import final, Dict, Optional, Union

from barecuda._device import Device
from barecuda._buffer import Allocator
from barecuda._device import _DeviceLike


@final
class DriverAllocator(Allocator):
    def __new__(cls, device: _DeviceLike = None) -> "DriverAllocator": ...

@final
class DriverMemoryPool(Allocator):
    def __new__(cls, device: _DeviceLike = None, *, release_threshold: Optional[int] = None,
                 limit: Optional[int] = None, default: bool = False) -> "DriverMemoryPool": ...
    @property
    def handle_int(self) -> int: ...
    @property
    @deprecated("use DriverMemoryPool.handle_int")
    def handle(self) -> int: ...
    def stats(self) -> Dict[str, int]: ...
    def trim(self, keep: int = 0) -> None: ...
    def set_release_threshold(self, nbytes: Optional[int]) -> None: ...
