"""Ownership (views, slices, re-imports, deferred frees), the one interop stream rule,
the torch/cupy fast path's class cache, and input checks of the memory modules, on the
driver double. GPU counterparts: tests/interop/test_interop_gpu.py."""
import gc
import sys
import types

import pytest

import barecuda as bc

np = pytest.importorskip("numpy")
from _helpers import fresh
import ptx
from _helpers import exchange_api_class




@pytest.fixture
def drv(fake):
    """The plain driver allocator: a free shows at once in fake.live("mem")."""
    return bc.DriverAllocator(0)


@pytest.fixture
def k2(fake):
    return bc.Module.from_ptx(ptx.PTR2).get_kernel("k2")


def _packed_ptrs(fake):
    params = fake.last_launch().params
    return int.from_bytes(params[0:8], "little"), int.from_bytes(params[8:16], "little")


def _driver_counts(fake):
    return {n: fake.calls(n) for n in ("cuEventRecord", "cuStreamWaitEvent", "cuStreamSynchronize",
                                       "cuCtxSynchronize", "cuLaunchKernel", "cuLaunchKernelEx")}


def _delta(fake, before):
    after = _driver_counts(fake)
    return {k: after[k] - before[k] for k in after}


# ------------------------------------------------------------------ ownership
def test_view_outlives_its_closed_owner(fake, drv):
    a = fresh(64, "float32", 1)
    b = bc.to_device(a, allocator=drv)
    live = fake.live("mem")
    v = b.view("int32")
    b.close()
    assert b.is_closed and b.ptr == 0
    assert fake.live("mem") == live                    # the free waits for the view
    np.testing.assert_array_equal(v.to_numpy(), a.view(np.int32))
    del v
    gc.collect()
    assert fake.live("mem") == live - 1                # the last dependant ran the free


def test_closed_buffer_refuses_use_before_any_driver_call(fake):
    b = bc.to_device(fresh(16, "float32", 2))
    other = bc.empty(16, "float32")
    v = b[0:4]
    b.close()
    before = _driver_counts(fake)
    copies = fake.calls("cuMemcpyDtoDAsync") + fake.calls("cuMemcpyDtoHAsync") + fake.calls("cuMemsetD8Async")
    for op in (lambda: b.copy_to(), lambda: b.copy_from(bytes(64)), lambda: other.copy_from(b),
               lambda: b.memset(0), lambda: b.view(), lambda: b[0:1], lambda: b.__dlpack__(),
               lambda: b.__cuda_array_interface__, lambda: int(b), lambda: bc.to_device(b),
               lambda: bc.copy_2d(other, b, 4, 1)):
        with pytest.raises(ValueError, match="closed"):
            op()
    assert _delta(fake, before)["cuStreamSynchronize"] == 0
    assert fake.calls("cuMemcpyDtoDAsync") + fake.calls("cuMemcpyDtoHAsync") + fake.calls("cuMemsetD8Async") == copies
    assert v.to_numpy().shape == (4,)                  # the slice still works


def test_closed_buffer_is_refused_by_pointer_of(fake, k2):
    """The launch packer's slow path (pointer_of): a closed buffer is never packed as 0."""
    b = bc.alloc(64)
    v = b.view()
    v.close()

    class Wrapped:           # reaches pointer_of through CAI of a closed DeviceBuffer
        @property
        def __cuda_array_interface__(self):
            return v.__cuda_array_interface__

    n = fake.launch_count()
    with pytest.raises(ValueError, match="closed"):
        k2.launch(1, 1, Wrapped(), b)
    assert fake.launch_count() == n
    # Empty the cell the local class closed over: on a free-threaded 3.13 its functions can
    # outlive gc.collect() once threads have run, and the leak check would count the buffer.
    del v


def test_slices_are_views_holding_the_owner(fake, k2, drv):
    a = fresh(100, "float32", 3)
    b = bc.to_device(a, allocator=drv)
    s = b[10:30]
    assert s.is_view and s.owner is b
    assert s.ptr == b.ptr + 40 and s.nbytes == 80 and s.shape == (20,) and s.size == 20
    np.testing.assert_array_equal(s.to_numpy(), a[10:30])
    k2.launch(1, 1, s, b[95:])
    assert _packed_ptrs(fake) == (b.ptr + 40, b.ptr + 380)
    s.copy_from(a[:20])
    np.testing.assert_array_equal(b.to_numpy()[10:30], a[:20])
    assert b[5:2].nbytes == 0 and b[-3:].shape == (3,)
    with pytest.raises(ValueError, match="step"):
        b[::2]
    with pytest.raises(TypeError, match="slice"):
        b[3]
    live = fake.live("mem")
    ss = s[2:4]                                       # a slice of a slice holds the same owner
    assert ss.owner is b and ss.ptr == b.ptr + 48
    del s
    b.close()
    assert fake.live("mem") == live
    del ss
    gc.collect()
    assert fake.live("mem") == live - 1


@pytest.mark.parametrize("how", ["dlpack", "dlpack_v1", "cai", "from_dlpack", "from_cai"])
def test_reimport_of_our_buffer_resolves_to_the_owner(fake, drv, how):
    b = bc.to_device(fresh(32, "int16", 4), allocator=drv)
    imp = {"dlpack": lambda: bc.as_device_buffer(b.__dlpack__()),
           "dlpack_v1": lambda: bc.as_device_buffer(b.__dlpack__(max_version=(1, 0))),
           "cai": lambda: bc.DeviceBuffer.from_cuda_array_interface(b),
           "from_dlpack": lambda: bc.DeviceBuffer.from_dlpack(b),
           "from_cai": lambda: bc.DeviceBuffer.from_cuda_array_interface(b)}[how]
    v = imp()
    assert v.owner is b and v.ptr == b.ptr
    live = fake.live("mem")
    b.close()
    assert fake.live("mem") == live                  # the import holds the allocation
    assert v.to_numpy().shape == (32,)
    del v
    gc.collect()
    assert fake.live("mem") == live - 1


def test_dlpack_export_holds_the_allocation(fake, drv):
    b = drv.alloc(256)
    live = fake.live("mem")
    cap = b.__dlpack__()
    b.close()
    assert fake.live("mem") == live
    del cap                                           # never consumed: its destructor unpins
    gc.collect()
    assert fake.live("mem") == live - 1


def test_use_through_a_view_marks_the_owner(fake, k2):
    """note_use must mark the allocation owner, not the view: the owner's free then
    waits for the other stream's work (plain allocator: a context sync)."""
    b = bc.DriverAllocator(0).alloc(256)
    s = bc.Stream()
    k2.launch(1, 1, b.view(), b[0:8], stream=s)
    before = fake.calls("cuCtxSynchronize")
    b.close()
    assert fake.calls("cuCtxSynchronize") == before + 1


# ---------------------------------------------------------------- input checks
@pytest.mark.parametrize("bad", [1.5, "8", None, True])
def test_sizes_must_be_ints(fake, bad):
    with pytest.raises(TypeError, match="nbytes must be an int"):
        bc.alloc(bad)
    with pytest.raises(TypeError, match="nbytes must be an int"):
        bc.DeviceBuffer(bad)


def test_memset_value_must_be_an_int(fake):
    b = bc.alloc(16)
    n = fake.calls("cuMemsetD8Async")
    for bad in (1.7, "1", None):
        with pytest.raises(TypeError, match="memset value must be an int"):
            b.memset(bad)
    assert fake.calls("cuMemsetD8Async") == n
    b.memset(np.uint8(3))                            # __index__ is fine


@pytest.mark.parametrize("bad", [{}, {"data": (0, False)}, {"shape": (1,), "typestr": "|u1"}])
def test_as_device_buffer_bad_dict_is_a_type_error(fake, bad):
    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        bc.as_device_buffer(bad)


@pytest.mark.parametrize("n", [2**31, 2**32, 2**63])
def test_size_class_near_the_top(fake, n):
    from barecuda._pool import _size_class
    cls, rounded = _size_class(n)
    assert rounded >= n and 0 <= cls < 832
    assert rounded - n <= n // 16                      # at most 6.25% rounding


@pytest.mark.parametrize("n", [2**63 + 1, 2**64 - 1])
def test_size_class_refuses_above_2_63(fake, n):
    from barecuda._pool import _size_class
    assert _size_class(n) == (-1, 0)


@pytest.mark.parametrize("n", [2**63, 2**64, 2**64 + 1])
def test_alloc_too_large_raises_before_the_driver(fake, n):
    before = fake.calls("cuMemAllocAsync") + fake.calls("cuMemAlloc")
    with pytest.raises(OverflowError):
        bc.alloc(n)
    assert fake.calls("cuMemAllocAsync") + fake.calls("cuMemAlloc") == before


@pytest.mark.parametrize("kw", [dict(dst_pitch=2**63, height=3), dict(src_pitch=2**62, height=5),
                                dict(dst_y=2**63 - 1, height=2), dict(src_x=2**64 - 1, height=1)])
def test_copy_2d_extent_overflow_is_checked(fake, kw):
    d = bc.alloc(4096)
    s = bc.alloc(4096)
    h = kw.pop("height")
    n = fake.calls("cuMemcpy2DAsync")
    with pytest.raises((OverflowError, ValueError)):
        bc.copy_2d(d, s, 16, h, **kw)
    assert fake.calls("cuMemcpy2DAsync") == n


def test_copy_3d_extent_overflow_is_checked(fake):
    d = bc.alloc(4096)
    n = fake.calls("cuMemcpy3DAsync")
    with pytest.raises((OverflowError, ValueError)):
        bc.copy_3d(d, bc.alloc(4096), 16, 2, 2**40, dst_pitch=2**30, src_pitch=16, dst_height=2**30)
    with pytest.raises(OverflowError):
        bc.copy_3d(d, bc.alloc(4096), 16, 2, 2, dst_pos=(0, 0, 2**64))
    assert fake.calls("cuMemcpy3DAsync") == n


# ------------------------------------------------------------- read-only imports
def test_read_only_import_refuses_writes(fake):
    b = bc.alloc(64)
    ro = bc.as_device_buffer(dict(b.__cuda_array_interface__, data=(b.ptr, True)))
    assert ro.readonly
    n = fake.calls("cuMemsetD8Async") + fake.calls("cuMemcpyHtoDAsync")
    with pytest.raises(ValueError, match="read-only"):
        ro.memset(0)
    with pytest.raises(ValueError, match="read-only"):
        ro.copy_from(bytes(64))
    with pytest.raises(ValueError, match="read-only"):
        bc.copy_2d(ro, b, 8, 1)
    assert fake.calls("cuMemsetD8Async") + fake.calls("cuMemcpyHtoDAsync") == n
    assert len(ro.copy_to()) == 64                    # reading is fine


# ---------------------------------------------------------- __dlpack__ streams
def test_dlpack_export_stream_rules(fake):
    b = bc.alloc(64, stream=bc.Stream())
    with pytest.raises(ValueError, match="stream=0"):
        b.__dlpack__(stream=0)
    with pytest.raises(ValueError):
        b.__dlpack__(stream=-5)
    with pytest.raises(TypeError):
        b.__dlpack__(stream=1.0)
    w = fake.calls("cuStreamWaitEvent")
    b.__dlpack__(stream=-1)                          # no synchronization asked
    assert fake.calls("cuStreamWaitEvent") == w
    consumer = bc.Stream()
    for s in (None, 1, 2, consumer.handle_int):
        b.__dlpack__(stream=s)                       # another stream: an event, never a host sync
        w += 1
        assert fake.calls("cuStreamWaitEvent") == w


# ----------------------------------------------------------- the one stream rule
class CaiProducer:
    """A CAI v3 producer whose pending work is on `stream`."""

    def __init__(self, buf, stream):
        self.buf, self.stream = buf, stream

    @property
    def __cuda_array_interface__(self):
        return dict(self.buf.__cuda_array_interface__, stream=self.stream)


class DlpackProducer:
    """A DLPack producer that records the consumer streams it was handed."""

    def __init__(self, buf):
        self.buf, self.seen = buf, []

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()

    def __dlpack__(self, *, stream=None, max_version=None):
        self.seen.append(stream)
        return self.buf.__dlpack__(stream=-1, max_version=max_version)


def _three_ways(k2, fake, t, other, s, wrap=True):
    """launch(t), bind(t)(), launch(as_device_buffer(t)): the driver work of each."""
    out = []
    before = _driver_counts(fake)
    k2.launch(1, 1, t, other, stream=s)
    out.append(_delta(fake, before))
    before = _driver_counts(fake)
    k2.bind(1, 1, t, other, stream=s)()
    out.append(_delta(fake, before))
    if wrap:
        before = _driver_counts(fake)
        k2.launch(1, 1, bc.as_device_buffer(t, stream=s), other, stream=s)
        out.append(_delta(fake, before))
    return out


def test_cai_stream_rule_is_the_same_for_launch_bind_and_wrap(fake, k2):
    producer = bc.Stream()
    s = bc.Stream()
    b = bc.alloc(64)
    other = bc.alloc(64, stream=s)
    t = CaiProducer(b, producer.handle_int)
    ways = _three_ways(k2, fake, t, other, s)
    assert ways[0] == ways[1] == ways[2]
    assert ways[0]["cuStreamWaitEvent"] == 1 and ways[0]["cuEventRecord"] == 1   # an event ...
    assert ways[0]["cuStreamSynchronize"] == 0 and ways[0]["cuCtxSynchronize"] == 0  # ... never a host sync
    # no 'stream' entry (or None): the producer says nothing to wait for
    ways = _three_ways(k2, fake, CaiProducer(b, None), other, s)
    assert ways[0] == ways[1] == ways[2] and ways[0]["cuStreamWaitEvent"] == 0
    with pytest.raises(ValueError, match="must not be 0"):
        k2.launch(1, 1, CaiProducer(b, 0), other, stream=s)


def test_dlpack_stream_rule_is_the_same_for_launch_bind_and_wrap(fake, k2):
    s = bc.Stream()
    b = bc.alloc(64)
    other = bc.alloc(64, stream=s)
    t = DlpackProducer(b)
    _three_ways(k2, fake, t, other, s)
    assert t.seen == [s.handle_int] * 3               # our consumer stream, every way
    t.seen.clear()
    k2.launch(1, 1, t, other)                         # legacy default stream: 1 (array API)
    assert t.seen == [1]


# -------------------------------------------------------------- tensor fast path
def _fake_library(monkeypatch, name, current_stream):
    """A stand-in torch/cupy module (only what pointer_of reads) and its array class,
    named exactly like the real one so that the class cache recognises it."""
    mod = types.ModuleType(name)
    if name == "torch":
        mod._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda ordinal: current_stream)

        class Tensor:
            def __init__(self, ptr, device):
                self.ptr, self.dev, self.calls = ptr, device, 0

            def data_ptr(self):
                self.calls += 1
                return self.ptr

            def get_device(self):
                return self.dev
        Tensor.__module__, Tensor.__qualname__ = "torch", "Tensor"
        cls = Tensor
    else:
        mod.cuda = types.SimpleNamespace(stream=types.SimpleNamespace(get_current_stream_ptr=lambda: current_stream))

        class ndarray:
            def __init__(self, ptr, device):
                self.data = types.SimpleNamespace(ptr=ptr, device_id=device)   # cupy's MemoryPointer
                self.calls = 0
        ndarray.__module__, ndarray.__qualname__ = "cupy", "ndarray"
        cls = ndarray
    setattr(mod, cls.__qualname__, cls)     # the class its module holds: the real one's place
    monkeypatch.setitem(sys.modules, name, mod)
    return cls


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_a_class_only_named_like_torch_or_cupy_is_not_read_as_theirs(fake, k2, monkeypatch, lib):
    """A class whose module and qualified name say torch.Tensor / cupy.ndarray, but which
    is not the class that module holds (or whose module is not loaded), goes the
    protocol path: a clear TypeError, no AttributeError from reading it as a tensor."""
    s = bc.Stream()
    real = _fake_library(monkeypatch, lib, s.handle_int)
    b = bc.alloc(64)

    class Impostor:                       # no data_ptr / get_device / .data
        pass
    Impostor.__module__, Impostor.__qualname__ = real.__module__, real.__qualname__
    k2.launch(1, 1, real(b.ptr, 0), b, stream=s)      # the module's own class: read
    assert _packed_ptrs(fake)[0] == b.ptr
    before = _driver_counts(fake)
    with pytest.raises(TypeError, match="not a device pointer"):
        k2.launch(1, 1, Impostor(), b, stream=s)
    monkeypatch.delitem(sys.modules, lib)       # the library not loaded at all

    class Stray:
        pass
    Stray.__module__, Stray.__qualname__ = real.__module__, real.__qualname__
    with pytest.raises(TypeError, match="not a device pointer"):
        k2.launch(1, 1, Stray(), b, stream=s)
    assert _delta(fake, before)["cuLaunchKernel"] == 0


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_tensor_fast_path(fake, k2, monkeypatch, lib):
    producer = bc.Stream()
    s = bc.Stream()
    cls = _fake_library(monkeypatch, lib, producer.handle_int)
    b = bc.alloc(64)
    other = bc.alloc(64, stream=s)
    t = cls(b.ptr + 16, 0)
    ways = _three_ways(k2, fake, t, other, s, wrap=False)   # as_device_buffer needs DLPack/CAI
    assert ways[0] == ways[1] and ways[0]["cuStreamWaitEvent"] == 1 and ways[0]["cuStreamSynchronize"] == 0
    assert _packed_ptrs(fake)[0] == b.ptr + 16
    # the producer's current stream is the consumer stream: nothing to wait for
    same = _fake_library(monkeypatch, lib, s.handle_int)(b.ptr, 0)
    before = _driver_counts(fake)
    k2.launch(1, 1, same, other, stream=s)
    assert _delta(fake, before)["cuStreamWaitEvent"] == 0


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_current_stream_is_read_once_per_launch(fake, k2, monkeypatch, lib):
    """One launch's tensors share the library's current stream: the first reads it and
    orders the consumer after it, the second does neither. Outside a launch (bind)
    each tensor does both, and a launch that failed half-way leaves no memo behind."""
    s = bc.Stream()
    cls = _fake_library(monkeypatch, lib, 0)
    producers = [bc.Stream(), bc.Stream()]
    reads, current = [], [producers[0].handle_int]

    def read(*ordinal):
        reads.append(ordinal)
        return current[0]
    mod = sys.modules[lib]
    if lib == "torch":
        mod._C._cuda_getCurrentRawStream = read
    else:
        mod.cuda.stream.get_current_stream_ptr = read
    b = bc.alloc(64)
    t1, t2 = cls(b.ptr, 0), cls(b.ptr + 8, 0)
    before = _driver_counts(fake)
    k2.launch(1, 1, t1, t2, stream=s)
    assert len(reads) == 1 and _delta(fake, before)["cuStreamWaitEvent"] == 1
    assert _packed_ptrs(fake) == (b.ptr, b.ptr + 8)
    before = _driver_counts(fake)
    k2.launch(1, 1, t1, t2, stream=s)                 # a new launch reads it again
    assert len(reads) == 2 and _delta(fake, before)["cuStreamWaitEvent"] == 1
    before = _driver_counts(fake)
    k2.bind(1, 1, t1, t2, stream=s)
    assert len(reads) == 4 and _delta(fake, before)["cuStreamWaitEvent"] == 2
    with pytest.raises(TypeError):
        k2.launch(1, 1, t1, object(), stream=s)       # fails after the first tensor
    current[0] = producers[1].handle_int
    before = _driver_counts(fake)
    k2.bind(1, 1, t1, t2, stream=s)                   # no memo left from the failed launch
    assert _delta(fake, before)["cuStreamWaitEvent"] == 2
    current[0] = s.handle_int                        # the library's current stream is ours
    before = _driver_counts(fake)
    k2.launch(1, 1, t1, t2, stream=s)
    assert _delta(fake, before)["cuStreamWaitEvent"] == 0


def test_dlpack_c_exchange_api_is_read_in_c(fake, k2):
    """A class with its own __dlpack_c_exchange_api__ goes through the C functions: the
    address (data + byte_offset), device checks naming both devices, the current stream
    once per launch; a subclass (which only inherits it) goes through the protocols."""
    s, producer = bc.Stream(), bc.Stream()
    counts = {"dltensor": 0, "stream": 0}
    current = [producer.handle_int]
    cls = exchange_api_class(current, counts)
    b = bc.alloc(64)
    before = _driver_counts(fake)
    k2.launch(1, 1, cls(b.ptr, 0), cls(b.ptr + 16, 0), stream=s)
    assert _packed_ptrs(fake) == (b.ptr, b.ptr + 16)
    assert counts == {"dltensor": 2, "stream": 1} and _delta(fake, before)["cuStreamWaitEvent"] == 1
    current[0] = s.handle_int
    before = _driver_counts(fake)
    k2.bind(1, 1, cls(b.ptr, 0), cls(b.ptr, 0), stream=s)()
    assert counts["stream"] == 3 and _delta(fake, before)["cuStreamWaitEvent"] == 0
    n = fake.launch_count()
    with pytest.raises(ValueError, match=r"device 2.*device 0"):
        k2.launch(1, 1, cls(b.ptr, 2), 0)
    with pytest.raises(ValueError, match="on the CPU"):
        k2.launch(1, 1, cls(b.ptr, 0, kind=1), 0)
    with pytest.raises(TypeError, match="not a device pointer"):
        k2.launch(1, 1, type("Sub", (cls,), {})(b.ptr, 0), 0)
    assert fake.launch_count() == n


def test_real_torch_cpu_tensor_is_refused(fake, k2):
    torch = pytest.importorskip("torch")
    n = fake.launch_count()
    with pytest.raises(ValueError, match="on the CPU"):
        k2.launch(1, 1, torch.ones(4), 0)
    with pytest.raises(ValueError, match="on the CPU"):
        k2.bind(1, 1, 0, torch.nn.Parameter(torch.ones(4)))
    assert fake.launch_count() == n


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_tensor_on_the_wrong_device_names_both(fake, k2, monkeypatch, lib):
    cls = _fake_library(monkeypatch, lib, 0)
    n = fake.launch_count()
    with pytest.raises(ValueError, match=r"device 3.*device 0"):
        k2.launch(1, 1, cls(4096, 3), 0)
    assert fake.launch_count() == n


def test_fast_path_is_by_exact_type(fake, k2, monkeypatch):
    cls = _fake_library(monkeypatch, "torch", 0)

    class Sub(cls):          # a subclass is not the fast path: it needs DLPack/CAI
        pass
    with pytest.raises(TypeError, match="not a device pointer"):
        k2.launch(1, 1, Sub(4096, 0), 0)


def _cupy_with_descriptors(monkeypatch, current_stream, counts):
    """A stand-in cupy whose ndarray.data is a property and whose MemoryPointer keeps
    ptr/device_id in slots (data descriptors, as CuPy's C-level attributes are): the
    reader calls the descriptors it found once per class, never getattr."""
    mod = types.ModuleType("cupy")
    mod.cuda = types.SimpleNamespace(stream=types.SimpleNamespace(get_current_stream_ptr=lambda: current_stream))
    monkeypatch.setitem(sys.modules, "cupy", mod)

    class MemoryPointer:
        __slots__ = ("ptr", "device_id")

        def __init__(self, ptr, device_id):
            self.ptr, self.device_id = ptr, device_id

    class ndarray:
        def __init__(self, ptr, device):
            self._mem = MemoryPointer(ptr, device)
            self.__dict__["data"] = "an instance attribute loses to the class's data descriptor"

        @property
        def data(self):
            counts["data"] += 1
            return self._mem

        def __getattribute__(self, name):
            if name == "data":
                counts["getattr"] += 1
            return object.__getattribute__(self, name)
    ndarray.__module__, ndarray.__qualname__ = "cupy", "ndarray"
    mod.ndarray = ndarray
    return ndarray


def test_cupy_read_through_its_classes_data_descriptors(fake, k2, monkeypatch):
    s = bc.Stream()
    counts = {"data": 0, "getattr": 0}
    cls = _cupy_with_descriptors(monkeypatch, s.handle_int, counts)
    b = bc.alloc(64)
    a1, a2 = cls(b.ptr + 8, 0), cls(b.ptr + 24, 0)
    k2.launch(1, 1, a1, a2, stream=s)
    assert _packed_ptrs(fake) == (b.ptr + 8, b.ptr + 24)
    assert counts == {"data": 2, "getattr": 0}       # the property, called by the reader itself
    k2.bind(1, 1, a2, a1, stream=s)()
    assert _packed_ptrs(fake) == (b.ptr + 24, b.ptr + 8)
    n = fake.launch_count()
    with pytest.raises(ValueError, match=r"device 1.*device 0"):
        k2.launch(1, 1, a1, cls(b.ptr, 1), stream=s)
    assert fake.launch_count() == n


def test_cupy_current_stream_through_its_c_function(fake, k2, monkeypatch):
    """CuPy 14's get_current_stream_ptr is a cdef function: barecuda calls it through its
    stream module's __pyx_capi__ capsule (named by its C signature), once per launch."""
    import ctypes as C
    producer, s = bc.Stream(), bc.Stream()
    ph, sh = producer.handle_int, s.handle_int       # what barecuda keeps refers to no Stream
    cls = _fake_library(monkeypatch, "cupy", 0)
    calls = []

    @C.CFUNCTYPE(C.c_ssize_t)
    def current():
        calls.append(1)
        return ph
    new = C.PYFUNCTYPE(C.py_object, C.c_void_p, C.c_void_p, C.c_void_p)(("PyCapsule_New", C.pythonapi))
    name = C.create_string_buffer(b"intptr_t (void)")
    stream_mod = types.SimpleNamespace(
        __pyx_capi__={"get_current_stream_ptr": new(C.cast(current, C.c_void_p), C.addressof(name), None)},
        get_current_stream_ptr=lambda: pytest.fail("the Python function was called"))
    monkeypatch.setattr(sys.modules["cupy"].cuda, "stream", stream_mod)
    b = bc.alloc(64)
    before = _driver_counts(fake)
    k2.launch(1, 1, cls(b.ptr, 0), cls(b.ptr + 8, 0), stream=s)
    assert len(calls) == 1 and _delta(fake, before)["cuStreamWaitEvent"] == 1
    assert _packed_ptrs(fake) == (b.ptr, b.ptr + 8)
    calls_at = len(calls)
    other = C.create_string_buffer(b"int (void)")              # not CuPy's signature
    cls2 = _fake_library(monkeypatch, "cupy", 0)                # a new class: looked up again
    monkeypatch.setattr(sys.modules["cupy"].cuda, "stream", types.SimpleNamespace(
        __pyx_capi__={"get_current_stream_ptr": new(C.cast(current, C.c_void_p), C.addressof(other), None)},
        get_current_stream_ptr=lambda: sh))
    before = _driver_counts(fake)
    k2.launch(1, 1, cls2(b.ptr, 0), cls2(b.ptr, 0), stream=s)   # the Python function: our stream
    assert len(calls) == calls_at and _delta(fake, before)["cuStreamWaitEvent"] == 0


def _all_driver_calls(fake):
    return {n: fake.calls(n) for n in ("cuLaunchKernel", "cuLaunchKernelEx", "cuGraphExecKernelNodeSetParams",
                                       "cuGraphKernelNodeSetParams", "cuMemcpyAsync", "cuMemcpyDtoDAsync",
                                       "cuEventRecord", "cuStreamWaitEvent")}


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_wrong_device_is_refused_alike_in_bind_set_arg_graph_nodes_and_arg_updates(fake, k2, monkeypatch, lib):
    """Issue #12: the wrong-device ValueError naming both devices, before any driver call,
    is the same in bind, LaunchPlan.set_arg, KernelNode.set_arg, Graph.add_kernel,
    ExecKernelNode.set_arg and ArgUpdate.set as in launch; every one leaves its slot as it was."""
    cls = _fake_library(monkeypatch, lib, 0)
    s = bc.Stream()
    b = bc.alloc(64)
    good, bad = cls(b.ptr + 8, 0), cls(b.ptr, 3)
    plan = k2.bind(1, 1, good, b, stream=s)
    g = bc.Graph()
    node = g.add_kernel(k2, 1, 1, b, b)
    exe = g.instantiate()
    enode = exe.kernel_node(node)
    upd = exe.prepare_args([(enode, 0), (enode, 1)])
    attempts = [
        lambda: k2.bind(1, 1, bad, b, stream=s),
        lambda: k2.bind(1, 1, b, bad, stream=s),
        lambda: plan.set_arg(1, bad),
        lambda: node.set_arg(0, bad),
        lambda: g.add_kernel(k2, 1, 1, b, bad),
        lambda: enode.set_arg(1, bad),
        lambda: enode.set_args(good, bad),
        lambda: upd.set(good, bad),
    ]
    n_nodes = g.num_nodes()
    for attempt in attempts:
        before = _all_driver_calls(fake)
        with pytest.raises(ValueError, match=r"device 3.*device 0"):
            attempt()
        assert _all_driver_calls(fake) == before, attempt
    assert g.num_nodes() == n_nodes
    # nothing changed where a call was refused: the plan and the nodes still launch their old values
    plan()
    assert _packed_ptrs(fake) == (b.ptr + 8, b.ptr)
    assert node.args == (b, b) and enode.args == (b, b)
    # and the fast path itself is taken in each (a right-device tensor is packed as its pointer)
    plan.set_arg(1, good)
    plan()
    assert _packed_ptrs(fake) == (b.ptr + 8, b.ptr + 8)
    enode.set_arg(0, good)
    exe.launch(s)
    s.synchronize()


NO_TORCH_IMPORT = r"""
import sys
tried = []
class Watch:                        # sees every import attempt, even one a try/except would hide
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "cupy"):
            tried.append(name)
        return None
sys.meta_path.insert(0, Watch())
import barecuda as bc
k = bc.Module.from_ptx(sys.argv[1]).get_kernel("k2")
b = bc.alloc(64)
k.launch(1, 1, b, b.ptr)
k.bind(1, 1, b, b)()
try:
    k.launch(1, 1, object(), b)     # an unknown object: refused, nothing imported to find out
except TypeError:
    pass
g = bc.Graph()
g.add_kernel(k, 1, 1, b, b)
g.instantiate().launch()
b.copy_from(bc.alloc(64))
bc.Stream.default().synchronize()
print(tried + sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "cupy")))
"""


def test_the_class_cache_never_imports_torch_or_cupy(fake_lib_path):
    """Issue #12: tensors are recognised by exact type through a lazily filled class
    cache; no launch, bind, graph or copy path imports torch or CuPy to do it."""
    import os
    import subprocess
    env = dict(os.environ, BARECUDA_LIBCUDA=fake_lib_path)
    p = subprocess.run([sys.executable, "-c", NO_TORCH_IMPORT, ptx.PTR2], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
