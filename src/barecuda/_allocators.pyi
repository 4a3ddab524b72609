__all__ = ["get_allocator", "set_allocator"]

from typing import Optional, Union

from barecuda._buffer import Allocator
from barecuda._device import Device
from barecuda._device import _DeviceLike


def get_allocator(device: _DeviceLike = None) -> Allocator: ...
def set_allocator(allocator: Optional[Allocator], device: _DeviceLike = None) -> Optional[Allocator]: ...
