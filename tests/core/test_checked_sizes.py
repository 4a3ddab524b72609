"""Checked arithmetic at the edges (issue 9, items 5 and 6; "Required" 3): every size,
offset, extent and layout computation, at 2**31, 2**32, 2**63 and 2**64.

A value that fits is passed to the driver unchanged (the double is made to fail the
call, and the error names the exact size: nothing wrapped on the way); a value that
does not fit raises OverflowError or ValueError before any driver call. Launch
geometry (grid, block, cluster, cooperative products, shared memory) is covered the same
way in tests/launch/test_launch_checks.py, size classes in tests/interop/test_interop.py."""
import pytest

import barecuda as bc

BIG = [2**31, 2**32, 2**63, 2**64]
FITS = 2**63            # byte counts are refused from here on (checked_size)


def refused(fake, calls, fn, exc=(OverflowError, ValueError)):
    """fn raises exc and none of the driver entry points `calls` ran."""
    before = [fake.calls(c) for c in calls]
    with pytest.raises(exc) as info:
        fn()
    assert [fake.calls(c) for c in calls] == before, f"reached the driver: {info.value}"
    return info.value


def reaches_driver_unchanged(fake, symbol, fn, nbytes, times=2):
    """The driver is asked for exactly `nbytes` (its failure names the size)."""
    fake.fail(symbol, 2, 0, times)                  # CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(bc.CudaOutOfMemoryError) as info:
        fn()
    assert f"{nbytes} bytes" in str(info.value), str(info.value)


# ------------------------------------------------------------------ allocations
@pytest.mark.parametrize("v", BIG)
@pytest.mark.parametrize("make", [bc.DriverAllocator, bc.MemoryPool], ids=["driver", "pool"])
def test_allocator_size(fake, v, make):
    a = make(0)
    if v < FITS:
        reaches_driver_unchanged(fake, "cuMemAllocAsync", lambda: a.alloc(v), v)
    else:
        refused(fake, ["cuMemAllocAsync", "cuMemAlloc"], lambda: a.alloc(v), OverflowError)


@pytest.mark.parametrize("v", BIG)
@pytest.mark.parametrize("shape", ["1d", "2d"])
def test_shape_products(fake, v, shape):
    """nbytes = product(shape) * itemsize: 4*v for (v,), v*v*4 for (v, v)."""
    a = bc.DriverAllocator(0)
    shp = (v,) if shape == "1d" else (v, v)
    total = v * 4 if shape == "1d" else v * v * 4
    if total < FITS:
        reaches_driver_unchanged(fake, "cuMemAllocAsync", lambda: bc.empty(shp, "float32", allocator=a), total)
    else:
        refused(fake, ["cuMemAllocAsync", "cuMemAlloc"], lambda: bc.empty(shp, "float32", allocator=a),
                OverflowError)


@pytest.mark.parametrize("v", BIG)
def test_managed_size(fake, v):
    if v < FITS:
        reaches_driver_unchanged(fake, "cuMemAllocManaged", lambda: bc.managed_empty(v), v, times=1)
    else:
        refused(fake, ["cuMemAllocManaged"], lambda: bc.managed_empty(v), OverflowError)


@pytest.mark.parametrize("v", BIG)
@pytest.mark.parametrize("pooled", [False, True])
def test_pinned_size(fake, v, pooled):
    make = bc.PinnedMemoryPool(0).empty if pooled else bc.PinnedBuffer
    if v < FITS:
        reaches_driver_unchanged(fake, "cuMemHostAlloc", lambda: make(v), v)
    else:
        refused(fake, ["cuMemHostAlloc"], lambda: make(v), OverflowError)


@pytest.mark.parametrize("bad", [-1, 1.5, "8"])
def test_pinned_size_must_be_a_non_negative_int(fake, bad):
    refused(fake, ["cuMemHostAlloc"], lambda: bc.PinnedBuffer(bad), (TypeError, ValueError))
    refused(fake, ["cuMemHostAlloc"], lambda: bc.PinnedMemoryPool(0).empty(bad), (TypeError, ValueError))


# --------------------------------------------------------------- copy extents
COPY_2D_ARGS = ["width_bytes", "height", "dst_pitch", "src_pitch", "dst_x", "dst_y", "src_x", "src_y"]


@pytest.mark.parametrize("v", BIG + [2**64 - 1, 2**64 - 8, 2**60 - 1])
@pytest.mark.parametrize("arg", COPY_2D_ARGS)
def test_copy_2d_every_extent(fake, arg, v):
    d, s = bc.alloc(4096), bc.alloc(4096)
    kw = dict(width_bytes=16, height=4)
    kw[arg] = v
    w, h = kw.pop("width_bytes"), kw.pop("height")
    refused(fake, ["cuMemcpy2DAsync"], lambda: bc.copy_2d(d, s, w, h, **kw))
    d.close()
    s.close()


COPY_3D_ARGS = [("depth", None), ("dst_height", None), ("src_height", None)] + [
    (side, axis) for side in ("dst_pos", "src_pos") for axis in (0, 1, 2)]


@pytest.mark.parametrize("v", BIG + [2**64 - 1])
@pytest.mark.parametrize("arg,axis", COPY_3D_ARGS)
def test_copy_3d_every_extent(fake, arg, axis, v):
    d, s = bc.alloc(4096), bc.alloc(4096)
    kw = dict(depth=2)
    if arg in ("dst_pos", "src_pos"):
        pos = [0, 0, 0]
        pos[axis] = v
        kw[arg] = tuple(pos)
    else:
        kw[arg] = v
    depth = kw.pop("depth")
    refused(fake, ["cuMemcpy3DAsync"], lambda: bc.copy_3d(d, s, 16, 2, depth, **kw))
    d.close()
    s.close()


# ------------------------------------------------------------------ globals
@pytest.mark.parametrize("offset", BIG + [2**64 - 1, 2**64 - 4, 61])
def test_global_write_offset(fake, ptx, offset):
    """offset + len(data) must not wrap: 2**64-1 + 4 is 3 in 64 bits."""
    m = bc.Module.from_ptx(ptx.WITH_GLOBALS)
    t = m.get_global("table")                       # 64 bytes
    refused(fake, ["cuMemcpyHtoD"], lambda: t.write(b"\1\2\3\4", offset=offset))
    t.write(b"\1\2\3\4", offset=60)                 # the last fitting offset works
    assert t.read()[60:] == b"\1\2\3\4"
    m.close()


# ------------------------------------------------------------ foreign layouts
FOREIGN = 1 << 40          # an address no allocation of ours (nor the double's heap) holds


@pytest.mark.parametrize("v", BIG)
def test_cai_shape_and_strides(fake, v):
    """nbytes of an imported layout is computed without wrapping: a shape or a stride
    whose span does not fit in 63 bits is refused. (Foreign memory: a span this large at
    one of our buffers' addresses runs past its end, BufferError.)"""
    b = bc.alloc(4096)
    one = {"data": (FOREIGN, False), "shape": (v,), "typestr": "<f4", "version": 3}
    if v * 4 < FITS:
        assert bc.as_device_buffer(one).nbytes == v * 4
        with pytest.raises(BufferError, match="runs past the end"):
            bc.as_device_buffer(dict(one, data=(b.ptr, False)))
    else:
        with pytest.raises(OverflowError):
            bc.as_device_buffer(one)
    with pytest.raises(OverflowError):
        bc.as_device_buffer(dict(one, shape=(v, v)))
    strided = {"data": (FOREIGN, False), "shape": (2, 2), "strides": (v, 4), "typestr": "<f4", "version": 3}
    if v + 8 < FITS:                                # last element at v + 4, 4 bytes long
        assert bc.as_device_buffer(strided).nbytes == v + 8
    else:
        with pytest.raises(OverflowError):
            bc.as_device_buffer(strided)
    b.close()



@pytest.mark.parametrize("dims", ["[4294967296][4294967296]", "[2305843009213693952]", "[4096][4096][4096][4096]",
                                  "[9223372036854775807]"])
def test_a_global_whose_size_overflows_is_refused(fake, ptx, dims):
    """Issue 9 item 10: the double itself crashed on a PTX constant whose size overflows."""
    text = ptx.header() + f".const .align 4 .u32 big{dims};\n.visible .entry k()\n{{\n    ret;\n}}\n"
    with pytest.raises(bc.CudaError, match="too large"):
        bc.Module.from_ptx(text)


# ================================================== hostile offsets and geometry
def test_hostile_copy_offsets_are_refused(fake, ptx):
    """Offsets that wrapped size_t in the bounds checks."""
    dst, src = bc.alloc(4096), bc.alloc(4096)
    n = fake.calls("cuMemcpy2DAsync") + fake.calls("cuMemcpy3DAsync")
    for call in (lambda: bc.copy_2d(dst, src, 16, 2, dst_y=2**60 - 1),
                 lambda: bc.copy_2d(dst, src, 16, 2, dst_x=2**64 - 8),
                 lambda: bc.copy_3d(dst, src, 16, 2, 2, src_pos=(0, 0, 2**64 - 1))):
        with pytest.raises((ValueError, OverflowError)):
            call()
    assert fake.calls("cuMemcpy2DAsync") + fake.calls("cuMemcpy3DAsync") == n
    g = bc.Module.from_ptx(ptx.WITH_GLOBALS).get_global("counter")
    w = fake.calls("cuMemcpyHtoD") + fake.calls("cuMemcpyHtoDAsync")
    with pytest.raises((ValueError, OverflowError)):
        g.write(b"\0\0\0\0", offset=2**64 - 1)
    assert fake.calls("cuMemcpyHtoD") + fake.calls("cuMemcpyHtoDAsync") == w


def test_cooperative_grid_and_cluster_do_not_wrap(fake, vadd):
    """More, at 2**31..2**64: tests/launch/test_launch_checks.py."""
    n = fake.launch_count()
    with pytest.raises(ValueError):
        vadd.launch_config(bc.LaunchConfig((2**20, 2**12, 1), 32, cooperative=True), 0, 0, 0, 1)
    with pytest.raises(ValueError):
        vadd.launch_config(bc.LaunchConfig((2**30, 4, 1), 32, cluster=(2**30, 4, 1)), 0, 0, 0, 1)
    assert fake.launch_count() == n


@pytest.mark.parametrize("n", [2**64 - 1, 2**64 - 2**59, 2**63 + 1])
def test_size_class_does_not_wrap_near_2_64(fake, n):
    from barecuda._pool import _size_class
    assert _size_class(n) == (-1, 0)
    with pytest.raises(OverflowError):
        bc.MemoryPool(0).alloc(n)
