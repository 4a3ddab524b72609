__all__ = ["managed_empty", "alloc_pitch"]

from typing import Any, Tuple, Union

from barecuda._buffer import DeviceBuffer
from barecuda._device import Device

_Shape = Union[int, Tuple[int, ...]]
_DeviceLike = Union[Device, int, None]
_StreamLike = Any

def managed_empty(shape: _Shape, dtype: Any = "uint8", *, device: _DeviceLike = None, stream: _StreamLike = None,
                  attach: str = "global") -> DeviceBuffer: ...
def alloc_pitch(width_bytes: int, height: int, *, element_size: int = 4, device: _DeviceLike = None,
                stream: _StreamLike = None) -> Tuple[DeviceBuffer, int]: ...
def prefetch(b: DeviceBuffer, where: Any, stream: _StreamLike) -> None: ...
def advise(b: DeviceBuffer, advice: Union[str, int], where: Any) -> None: ...
