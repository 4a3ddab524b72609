"""The DLPack capsules barecuda produces (see _dlpack_export.pyx)."""
from barecuda._buffer cimport DeviceBuffer

# A "dltensor_versioned" (versioned) or "dltensor" capsule of b's memory; pins b's
# owner until the consumer (or the capsule's destructor) runs the deleter.
# copied: b is a copy made for this export (DLPACK_FLAG_BITMASK_IS_COPIED).
cdef object make_capsule(DeviceBuffer b, bint versioned, bint copied)
# The DeviceBuffer a managed tensor of ours was exported from; None for a foreign one.
cdef DeviceBuffer our_export(void *mt, bint versioned)
