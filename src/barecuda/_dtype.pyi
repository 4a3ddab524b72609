"""The dtype table (no public names; see barecuda.empty and DeviceBuffer.dtype)."""
from typing import Tuple, Union

# A shape argument.
_Shape = Union[int, Tuple[int, ...]]
