__all__ = ["as_device_buffer"]

from typing import Any

from barecuda._buffer import DeviceBuffer

_StreamLike = Any

def as_device_buffer(obj: Any, *, stream: _StreamLike = None) -> DeviceBuffer: ...
