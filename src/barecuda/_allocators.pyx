"""The default allocator of each device: the registry behind get_allocator/set_allocator.

Owns: the per-device table of default allocators (read without a lock on every
allocation that names no allocator, written under a lock), the lazy creation of a
device's default (a plain DriverAllocator, or what the factory that _pool installs
builds), and get_allocator / set_allocator.

The Allocator interface and DeviceBuffer live in _buffer, which cimports this module;
so this module reaches _buffer (the Allocator type check) and _driver_pool (the plain
allocator) only through Python imports on cold paths: a device's first default,
set_allocator. The cimport graph keeps no cycle.
"""

__all__ = ["get_allocator", "set_allocator"]
from cpython.ref cimport PyObject
from libc.string cimport memset
import threading

from barecuda._errors cimport bc_state_t
from barecuda._loader cimport runtime_state, ensure_driver
from barecuda._device cimport device_at, MAX_DEVICES
from barecuda._stream cimport resolve_device

cdef bc_state_t *ST = runtime_state()

# Borrowed pointers for the lock-free read; the list holds the references.
cdef PyObject *_default_alloc[MAX_DEVICES]
memset(_default_alloc, 0, sizeof(_default_alloc))
cdef list _default_alloc_refs = [None] * MAX_DEVICES
_alloc_lock = threading.Lock()
_default_factory = None
cdef object _allocator_cls = None       # barecuda._buffer.Allocator, imported on first use


cdef object default_allocator(int ordinal):
    cdef PyObject *a = _default_alloc[ordinal] if 0 <= ordinal < MAX_DEVICES else NULL
    if a != NULL:
        return <object>a
    return _make_default(ordinal)


cdef object _allocator_type():
    """barecuda._buffer.Allocator (_buffer cimports this module: imported here late)."""
    global _allocator_cls
    if _allocator_cls is None:
        from barecuda._buffer import Allocator
        _allocator_cls = Allocator
    return _allocator_cls


cdef object _make_default(int ordinal):
    if not 0 <= ordinal < MAX_DEVICES:
        raise ValueError(f"device ordinal {ordinal} out of range")
    with _alloc_lock:
        if _default_alloc[ordinal] == NULL:
            dev = device_at(ordinal)
            a = _default_factory(dev) if _default_factory is not None else _driver_allocator(dev)
            if not isinstance(a, _allocator_type()):
                raise TypeError("the default allocator factory must return a barecuda Allocator")
            _default_alloc_refs[ordinal] = a
            _default_alloc[ordinal] = <PyObject *>a
    return <object>_default_alloc[ordinal]


def get_allocator(device=None):
    """The allocator ``alloc``/``empty``/``to_device`` use on ``device`` by default."""
    ensure_driver(ST)
    return default_allocator(resolve_device(device, None).ordinal)


def set_allocator(allocator, device=None):
    """Make ``allocator`` the default for its device (``None`` restores the plain
    driver allocator on ``device``). Buffers allocated before keep their allocator.
    Returns the previous one."""
    cdef int o
    ensure_driver(ST)
    if allocator is not None and not isinstance(allocator, _allocator_type()):
        raise TypeError(f"expected a barecuda Allocator, not {type(allocator).__name__}")
    o = allocator.device.ordinal if allocator is not None else resolve_device(device, None).ordinal
    if allocator is None:
        allocator = _driver_allocator(o)
    with _alloc_lock:
        prev = _default_alloc_refs[o]
        _default_alloc_refs[o] = allocator
        _default_alloc[o] = <PyObject *>allocator
    return prev


cdef object _driver_allocator(object device):
    """A plain DriverAllocator (in _driver_pool, which cimports _buffer) for device."""
    from barecuda._driver_pool import DriverAllocator
    return DriverAllocator(device)


def _set_default_allocator_factory(factory):
    """Used by barecuda._pool: build each device's default allocator with factory(Device)."""
    global _default_factory
    _default_factory = factory
