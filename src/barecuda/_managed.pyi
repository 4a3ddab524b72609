__all__ = ["managed_empty", "alloc_pitch"]

from typing import Any, Tuple, Union

from barecuda._buffer import DeviceBuffer
from barecuda._device import Device
from barecuda._device import _DeviceLike
from barecuda._dtype import _Shape
from barecuda._stream import _StreamLike


def managed_empty(shape: _Shape, dtype: Any = "uint8", *, device: _DeviceLike = None, stream: _StreamLike = None,
                  attach: str = "global") -> DeviceBuffer: ...
def alloc_pitch(width_bytes: int, height: int, *, element_size: int = 4, device: _DeviceLike = None,
                stream: _StreamLike = None) -> Tuple[DeviceBuffer, int]: ...
def prefetch(b: DeviceBuffer, where: Any, stream: _StreamLike) -> None: ...
def advise(b: DeviceBuffer, advice: Union[str, int], where: Any) -> None: ...
