__all__ = ["as_device_buffer"]

from typing import Any

from barecuda._buffer import DeviceBuffer
from barecuda._stream import _StreamLike


def as_device_buffer(obj: Any, *, stream: _StreamLike = None) -> DeviceBuffer: ...
