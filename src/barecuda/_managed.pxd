"""Managed and pitched device memory (see _managed.pyx)."""
from barecuda._device cimport Device
from barecuda._buffer cimport Allocator

# The allocator of managed (KIND_MANAGED) or pitched (KIND_SYNC) memory on dev.
cdef Allocator waiting_allocator(Device dev, int kind)
