"""barecuda: NVIDIA GPUs through the CUDA driver API alone."""
from barecuda._errors import (
    BarecudaError, CudaError, CudaWarning, DriverNotFoundError, DriverVersionError,
    ForkedProcessError, CudaOutOfMemoryError, CudaInvalidValueError, CudaNotReadyError,
    CudaNotFoundError, CudaNotSupportedError, CudaInvalidHandleError, CudaInvalidContextError,
    CudaInvalidImageError, CudaInvalidPtxError, CudaNoDeviceError, CudaInvalidDeviceError,
    CudaNotInitializedError, CudaLaunchError, CudaStickyError, CudaStreamCaptureError,
    error_info, error_class,
)
from barecuda._loader import is_available, driver_version, driver_path

__version__ = "0.1.0"
