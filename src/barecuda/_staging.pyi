__all__ = ["configure_staging"]

from typing import Any, Dict, Optional, Union
from barecuda._device import Device
from barecuda._device import _DeviceLike


def copy_htod(dev_ptr: int, host_obj: Any, stream: Any = ..., *, device: _DeviceLike = ...) -> None: ...
def copy_dtoh(host_obj: Any, dev_ptr: int, stream: Any = ..., *, device: _DeviceLike = ..., fresh: bool = ...) -> None: ...
def configure_staging(*, chunk_bytes: Optional[int] = ..., chunks: Optional[int] = ...,
                      threads: Optional[int] = ..., threshold: Optional[int] = ...,
                      min_piece: Optional[int] = ..., min_part: Optional[int] = ...,
                      nt_htod: Optional[bool] = ..., nt_dtoh: Optional[bool] = ...,
                      spin_us: Optional[float] = ...) -> Dict[str, Union[int, float, bool]]: ...
configure = configure_staging
def stats() -> Dict[str, Any]: ...
def release() -> None: ...
