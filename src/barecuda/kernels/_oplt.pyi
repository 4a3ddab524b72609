"""Type stubs for barecuda.kernels._oplt: the op's record of a cuBLASLt matmul call (C-level API only)."""
from typing import List

__all__: List[str] = []
