"""Launch plans (``Kernel.bind``), ``PlanList`` and ``launch_all`` against the fake driver:
what a plan packs (compared with the reference packer ``ref_pack``), what it keeps
alive and pins, and the order and errors of a batch."""
import ctypes
import gc
import struct
import sys
import weakref

import pytest

import barecuda as bc
from barecuda import Module
from _helpers import ref_pack, no_launch


@pytest.fixture(autouse=True)
def _collect():
    gc.collect()
    yield


# ------------------------------------------------------------ plans
def test_plan_packs_like_launch_and_set_arg(fake, ptx):
    k = Module.from_ptx(ptx.MIXED).get_kernel("mixed")
    types = ["u8", "f64", "s8", "f32", "s16", "s64", "ptr"]
    vals = [1, 2.5, -3, 4.5, -5, 6, 7]
    s = bc.Stream()
    plan = k.bind((3, 2), 64, *vals, stream=s, shared_mem=256)
    assert plan.grid == (3, 2, 1) and plan.block == (64, 1, 1) and plan.shared_mem == 256
    before = fake.calls("cuLaunchKernel")
    plan()
    assert fake.calls("cuLaunchKernel") == before + 1
    rec = fake.last_launch()
    assert rec.params == ref_pack(types, vals)
    assert (rec.grid, rec.block, rec.shared, rec.stream) == ((3, 2, 1), (64, 1, 1), 256, s.handle_int)
    k.launch((3, 2), 64, *vals, stream=s, shared_mem=256)
    assert fake.last_launch().params == rec.params
    plan.set_arg(3, -0.25)
    plan.set_arg(-1, 0xABC)
    vals[3], vals[6] = -0.25, 0xABC
    plan.launch()
    assert fake.last_launch().params == ref_pack(types, vals)
    assert plan.args == tuple(vals)
    # a failed set_arg leaves the slot and the kept argument as they were
    with pytest.raises(OverflowError):
        plan.set_arg(0, 256)
    with pytest.raises(IndexError):
        plan.set_arg(7, 1)
    plan()
    assert fake.last_launch().params == ref_pack(types, vals)
    assert plan.args[0] == 1
    plan.stream = None
    plan()
    assert fake.last_launch().stream == 0


def test_plan_keeps_its_arguments_alive(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    buf = bc.alloc(64)
    s = bc.Stream()
    ref_buf = weakref.ref(buf)
    streams = sys.getrefcount(s)
    plan = k.bind(1, 1, buf, buf, buf, 16, stream=s)
    assert sys.getrefcount(s) == streams + 1
    del buf
    gc.collect()
    assert ref_buf() is not None
    plan()
    plan.set_arg(0, 0)
    plan.set_arg(1, 0)
    assert ref_buf() is not None
    plan.set_arg(2, 0)
    plan.stream = None
    gc.collect()
    assert ref_buf() is None
    assert sys.getrefcount(s) == streams


def test_launch_all_and_plan_list_in_order(fake, ptx):
    mod = Module.from_ptx(ptx.WITH_GLOBALS)
    first, second = mod.get_kernel("first"), mod.get_kernel("second")
    vadd = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    plans = [first.bind(1, 1, 11), second.bind(2, 1, 22, 3), vadd.bind(3, 1, 1, 2, 3, 4), first.bind(4, 1, 44)]
    for issue in (lambda: bc.launch_all(plans), lambda: bc.launch_all(tuple(plans)), bc.PlanList(plans)):
        n0 = fake.launch_count()
        issue()
        assert fake.launch_count() == n0 + 4
        got = [fake.last_launch(back) for back in (3, 2, 1, 0)]
        assert [g.name for g in got] == ["first", "second", "vadd", "first"]
        assert [g.grid[0] for g in got] == [1, 2, 3, 4]
        assert got[0].params == struct.pack("<I", 11) and got[3].params == struct.pack("<I", 44)
    pl = bc.PlanList(plans)
    assert len(pl) == 4 and pl[1] is plans[1] and list(pl) == plans
    plans[0].set_arg(0, 99)
    pl()
    assert fake.last_launch(3).params == struct.pack("<I", 99)
    no_launch(fake, lambda: bc.launch_all(plans + [object()]), TypeError, "item 4")
    with pytest.raises(TypeError, match="item 1"):
        bc.PlanList([plans[0], 5])


def test_batch_driver_error_names_the_plan(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    plans = [k.bind(1, 1, 0, 0, 0, i) for i in range(3)]
    fake.fail("cuLaunchKernel", 701, after=1)
    with pytest.raises(bc.CudaLaunchError, match="plan 1"):
        bc.PlanList(plans)()
    assert fake.last_launch().params[-4:] == struct.pack("<I", 0)



def _pending_lib(fake):
    lib = fake.lib
    for name, res, args in [("fakecuda_pending_mode", ctypes.c_int, [ctypes.c_int]),
                            ("fakecuda_early_frees", ctypes.c_longlong, [])]:
        getattr(lib, name).restype = res
        getattr(lib, name).argtypes = args
    return lib


@pytest.mark.parametrize("how", ["bind", "set_arg"])
def test_plan_defers_the_free_of_a_closed_argument(fake, ptx, how):
    # a.close() while a plan holds a: the plan's later launches still get allocated
    # memory (the double counts a free that queued work still uses); the free runs
    # when the plan goes.
    lib = _pending_lib(fake)
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    s = bc.Stream()
    gc.collect()
    mem0 = fake.live("mem")
    early0 = lib.fakecuda_early_frees()
    lib.fakecuda_pending_mode(1)
    try:
        a = bc.empty(64, "float32", allocator=bc.DriverAllocator())
        other = bc.empty(64, "float32", allocator=bc.DriverAllocator())
        if how == "bind":
            plan = k.bind(1, 32, a, a, a, 16, stream=s)
        else:
            plan = k.bind(1, 32, other, other, other, 16, stream=s)
            for i in range(3):
                plan.set_arg(i, a)
        plan()
        a.close()
        assert a.is_closed
        with pytest.raises(ValueError, match="closed"):
            k.launch(1, 32, a, a, a, 16, stream=s)      # the closed handle itself is refused
        assert fake.live("mem") == mem0 + 2              # ...but its memory is still allocated
        plan()
        plan()
        assert lib.fakecuda_early_frees() == early0
        del plan
        gc.collect()
        s.synchronize()
        bc.Device(0).synchronize()
        gc.collect()
        assert lib.fakecuda_early_frees() == early0
        assert fake.live("mem") == mem0 + 1              # freed once the plan went; `other` remains
    finally:
        lib.fakecuda_pending_mode(0)
    del other
    gc.collect()
    assert fake.live("mem") == mem0


def test_set_arg_unpins_what_it_replaces(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    gc.collect()
    mem0 = fake.live("mem")
    a, b = bc.empty(64, "float32", allocator=bc.DriverAllocator()), bc.empty(64, "float32", allocator=bc.DriverAllocator())
    plan = k.bind(1, 32, a, a, b, 16)
    plan.set_arg(0, b)
    plan.set_arg(1, 0)            # a no longer used by the plan: its close frees at once
    a.close()
    assert fake.live("mem") == mem0 + 1
    b.close()                     # b still used by the plan: deferred
    assert fake.live("mem") == mem0 + 1
    plan()
    del plan
    gc.collect()
    assert fake.live("mem") == mem0
