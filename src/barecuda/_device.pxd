"""Devices and their primary contexts."""
from barecuda._abi cimport CUdevice, CUcontext
from barecuda._loader cimport set_current

# The most devices barecuda's per-device tables hold (contexts, Device objects, default
# allocators): the one definition.
cdef enum:
    MAX_DEVICES = 256

cdef class Device:
    cdef readonly int ordinal
    """The device's ordinal (0-based, as CUDA_VISIBLE_DEVICES numbers them)."""
    cdef CUdevice handle
    cdef CUcontext ctx          # primary context; NULL until first use (see activate)

    cdef int activate(self) except -1

# Primary context of device `ordinal`, retained once per process and made current on
# the calling thread (cached per thread: no driver call once the thread is bound).
cdef CUcontext activate_device(int ordinal) except NULL

cdef inline int make_current(Device d) except -1:
    """d.activate() for a device whose primary context is already known: no call into
    _device (the context is retained for the life of the process once known)."""
    if d.ctx != NULL:
        return set_current(d.ctx)
    return d.activate()
cdef Device device_of(object device)     # None -> current device; int -> Device(int); Device -> itself

# -- memory (mem): the one cache of Device objects, one per ordinal (see the end of _device.pyx)
cdef Device device_at(int ordinal)      # the cached Device for ordinal (range-checked once)
cdef Device current_device()            # device_at(the calling thread's default device)
