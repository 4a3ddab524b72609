"""Device, Stream and Event: on the driver test double (CPU) and on a real GPU."""
import _thread
import gc
import os
import pickle
import threading
import time

import pytest

import barecuda as bc
from barecuda import _device, _stream
from _helpers import DriverCalls, run_child

NOT_READY = 600


# ------------------------------------------------------------------ fake driver
def test_device_basics(fake):
    d = bc.Device(0)
    assert d.ordinal == 0 and int(d.__index__()) == 0
    assert d.name == "FakeCUDA Device 0"
    assert d.compute_capability == (9, 0)
    assert d.attribute("multiprocessor_count") == 132
    assert d.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT") == 132
    assert d.attribute(16) == 132
    assert d.total_memory == 80 << 30
    assert d.uuid.startswith("GPU-") and len(d.uuid) == 40
    assert d.pci_bus_id.startswith("0000:")
    assert d == bc.Device(0) and hash(d) == hash(bc.Device(0))
    assert pickle.loads(pickle.dumps(d)) == d
    free, total = d.mem_info()
    assert 0 < free <= total
    assert bc.device_count() >= 1


def test_every_attribute_name_reaches_the_driver_with_its_value(fake):
    d = bc.Device(0)
    for name, code in _device.ATTRIBUTES.items():
        fake.set_attribute(0, code, code * 3 + 1)
        assert d.attribute(name) == code * 3 + 1, name


def test_bad_device_input_raises_before_the_driver(fake):
    d0 = bc.Device(0)
    before = fake.calls("cuDeviceGet")
    attr_before = fake.calls("cuDeviceGetAttribute")
    with pytest.raises(ValueError, match="out of range"):
        bc.Device(bc.device_count())
    with pytest.raises(ValueError, match="out of range"):
        bc.Device(-1)
    with pytest.raises(TypeError):
        bc.Device("0")
    with pytest.raises(ValueError, match="unknown device attribute"):
        d0.attribute("no_such_thing")
    assert fake.calls("cuDeviceGet") == before
    assert fake.calls("cuDeviceGetAttribute") == attr_before


def test_context_is_bound_once_per_thread(fake):
    d = bc.Device(0)
    d.set_current()
    n = fake.calls("cuCtxSetCurrent")
    for _ in range(100):
        bc.Stream().synchronize()
    assert fake.calls("cuCtxSetCurrent") == n, "an already bound thread must not rebind"

    def other():
        bc.Stream().synchronize()
    t = threading.Thread(target=other, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert fake.calls("cuCtxSetCurrent") == n + 1, "a new thread binds exactly once"


def test_stream_lifecycle_and_properties(fake):
    live = fake.live("stream")
    s = bc.Stream(priority=-3, non_blocking=True)
    assert fake.live("stream") == live + 1
    assert s.priority == -3
    assert s.non_blocking is True
    assert s.query() is True
    s.synchronize()
    s.synchronize_blocking()
    assert s.__cuda_stream__() == (0, s.handle_int) and s.handle_int != 0
    least, greatest = bc.Device(0).stream_priority_range()
    assert greatest <= least
    del s
    gc.collect()
    assert fake.live("stream") == live
    with bc.Stream() as s2:
        assert fake.live("stream") == live + 1
    assert fake.live("stream") == live
    s2.close()  # idempotent


def test_failed_stream_constructor_leaves_nothing(fake):
    live = fake.live("stream")
    fake.fail("cuStreamCreateWithPriority", 2)
    with pytest.raises(bc.CudaOutOfMemoryError):
        bc.Stream()
    assert fake.live("stream") == live


def test_destroy_failure_is_a_warning_not_an_exception(fake):
    s = bc.Stream()
    fake.fail("cuStreamDestroy", 400)
    with pytest.warns(bc.CudaWarning, match="cuStreamDestroy"):
        del s
        gc.collect()


def test_foreign_streams_are_accepted_and_never_destroyed(fake):
    owner = bc.Stream()

    class Proto:
        def __cuda_stream__(self):
            return (0, owner.handle_int)

    class TorchLike:               # torch.cuda.Stream exposes its handle as .cuda_stream
        cuda_stream = owner.handle_int
    TorchLike.__module__ = "torch.cuda.streams"

    destroyed = fake.calls("cuStreamDestroy")
    for obj in (Proto(), TorchLike(), owner.handle_int):
        w = bc.Stream.from_handle(obj)
        assert w.handle_int == owner.handle_int
        ev = bc.Event().record(obj)
        ev.synchronize()
        del w
        gc.collect()
    assert fake.calls("cuStreamDestroy") == destroyed
    with pytest.raises(TypeError, match="__cuda_stream__"):
        bc.Event().record(object())
    # Empty the cell the local class closed over: on a free-threaded 3.13 its functions can
    # outlive gc.collect() once threads have run, and the leak check would count the stream.
    del owner


def test_events_record_wait_and_time(fake):
    s1, s2 = bc.Stream(), bc.Stream()
    start = s1.record()
    time.sleep(0.002)
    end = bc.Event().record(s1)
    end.synchronize()
    assert end.query() is True
    ms = end.elapsed_ms(start)
    assert ms >= 1.0
    assert end - start == pytest.approx(ms)
    n = fake.calls("cuStreamWaitEvent")
    s2.wait(end)
    s2.wait(s1)
    assert fake.calls("cuStreamWaitEvent") == n + 2
    with pytest.raises(ValueError, match="timing"):
        bc.Event(timing=False).elapsed_ms(start)


def test_query_reports_not_ready(fake):
    s = bc.Stream()
    fake.fail("cuStreamQuery", NOT_READY)
    assert s.query() is False
    assert s.query() is True


def test_synchronize_waits_until_ready(fake):
    s = bc.Stream()
    fake.fail("cuStreamQuery", NOT_READY, times=50)
    s.synchronize()
    assert fake.calls("cuStreamQuery") >= 51


def test_synchronize_is_interruptible_with_ctrl_c(fake):
    """Ctrl-C ends a wait on a GPU that never finishes. Under nohup SIGINT is ignored
    (interrupt_main() would then do nothing): the test installs Python's default
    handler for its duration, and the wait has a timeout so it can never hang."""
    import signal
    s = bc.Stream()
    fake.fail("cuStreamQuery", NOT_READY, times=-1)   # "the GPU never finishes"
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            s.synchronize(timeout=20)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, old)
        fake.reset()
    assert time.monotonic() - t0 < 2.0


def test_sticky_errors_from_waits_say_restart(fake):
    s = bc.Stream()
    fake.fail("cuStreamQuery", 700)
    with pytest.raises(bc.CudaStickyError, match="restart") as ei:
        s.synchronize()
    assert ei.value.code == 700 and ei.value.call == "cuStreamSynchronize"


# ------------------------------------------------------------------ real GPU
@pytest.mark.gpu
def test_gpu_device_report():
    d = bc.Device(0)
    assert d.compute_capability >= (7, 0)
    assert d.attribute("multiprocessor_count") > 0
    assert d.total_memory > 1 << 30
    free, total = d.mem_info()
    assert 0 < free <= total == d.total_memory
    assert len(d.attributes()) > 100


@pytest.mark.gpu
def test_gpu_streams_events_and_priorities():
    least, greatest = bc.Device(0).stream_priority_range()
    hi = bc.Stream(priority=greatest)
    lo = bc.Stream(priority=least, non_blocking=True)
    assert hi.priority == greatest and lo.priority == least
    assert lo.non_blocking and not hi.non_blocking
    a, b = hi.record(), bc.Event()
    lo.wait(a)
    b.record(lo)
    b.synchronize()
    assert b.query() and b.elapsed_ms(a) >= 0.0


@pytest.mark.gpu
def test_gpu_every_visible_device_works():
    for i in range(bc.device_count()):
        d = bc.Device(i)
        s = bc.Stream(d)
        buf = bc.to_device(bytes(range(256)), stream=s, device=d)
        assert bytes(buf.to_numpy(stream=s).tobytes()) == bytes(range(256))
        d.synchronize()


@pytest.mark.gpu
def test_gpu_torch_current_context_is_shared():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    t = torch.arange(10, device="cuda:0", dtype=torch.float32)
    torch.cuda.synchronize()
    d = bc.Device()      # follows the context torch made current
    assert d.ordinal == 0
    view = bc.as_device_buffer(t)
    assert list(view.to_numpy()) == list(range(10))


def test_default_device_follows_the_users_choice_not_internal_switches(fake_lib_path, tmp_path):
    """Two fake devices, in a fresh interpreter (the double reads its device count at load)."""
    code = r'''
import threading, barecuda as bc
assert bc.device_count() == 2
s1 = bc.Stream(1)                      # barecuda binds device 1's context internally...
assert bc.Device().ordinal == 0        # ...which must not change the default device
bc.Device(1).set_current()
assert bc.Device().ordinal == 1 and bc.Stream().device.ordinal == 1
seen = []
t = threading.Thread(target=lambda: seen.append(bc.Device().ordinal)); t.start(); t.join(30)
assert seen == [0], seen               # the choice is per thread
print("ok")
'''
    out = run_child(code, fake_lib_path, FAKECUDA_DEVICES=2)
    assert out.strip() == "ok", out


# ------------------------------------------------------- issue 13 item 3, issue 9 items 8-10

def _in_thread(fn, timeout=30):
    """Run fn() on a fresh thread (no context bound there yet); re-raise its error."""
    box = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as e:       # noqa: BLE001 -- handed to the caller
            box["error"] = e
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} did not finish within {timeout} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_stream_and_event_operations_bind_the_context_on_fresh_threads(fake):
    s, s2 = bc.Stream(), bc.Stream()
    start = s.record()
    # Every operation, each on a thread that never used barecuda before.
    assert _in_thread(s.query) is True
    _in_thread(s.synchronize)
    _in_thread(s.synchronize_blocking)
    _in_thread(lambda: s.synchronize(timeout=5))
    end = _in_thread(lambda: bc.Event(s.device).record(s))
    _in_thread(lambda: s2.wait(end))
    _in_thread(lambda: s2.wait(s))
    ev = _in_thread(lambda: s.record())
    assert _in_thread(ev.query) is True
    _in_thread(ev.synchronize)
    _in_thread(lambda: end.synchronize(timeout=5))
    assert _in_thread(lambda: end.elapsed_ms(start)) >= 0.0
    assert _in_thread(lambda: s.priority) == 0 and _in_thread(lambda: s.non_blocking) is False
    _in_thread(ev.close)
    _in_thread(s2.close)
    d = bc.Device(0)
    assert _in_thread(d.stream_priority_range) == d.stream_priority_range()
    _in_thread(d.synchronize)


def test_synchronize_timeout_raises_and_leaves_the_work_queued(fake):
    s = bc.Stream()
    ev = s.record()
    destroyed = fake.calls("cuStreamDestroy")
    fake.fail("cuStreamQuery", NOT_READY, times=-1)      # "the GPU never finishes"
    fake.fail("cuEventQuery", NOT_READY, times=-1)
    try:
        for obj in (s, ev):
            t0 = time.monotonic()
            with pytest.raises(TimeoutError, match="did not complete within 0.1 s"):
                obj.synchronize(timeout=0.1)
            assert 0.09 <= time.monotonic() - t0 < 5.0
            with pytest.raises(TimeoutError):
                obj.synchronize(timeout=0)
    finally:
        fake.reset()
    # Nothing was cancelled or destroyed; the same objects still wait normally.
    assert fake.calls("cuStreamDestroy") == destroyed
    s.synchronize(timeout=5)
    ev.synchronize(timeout=5)
    assert s.query() and ev.query()


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), (float("nan"), ValueError), ("1", TypeError),
                                      (True, TypeError)])
def test_bad_timeouts_are_refused_before_the_driver(fake, bad, exc):
    s, ev = bc.Stream(), bc.Event()
    q, eq = fake.calls("cuStreamQuery"), fake.calls("cuEventQuery")
    with pytest.raises(exc):
        s.synchronize(timeout=bad)
    with pytest.raises(exc):
        ev.synchronize(timeout=bad)
    assert (fake.calls("cuStreamQuery"), fake.calls("cuEventQuery")) == (q, eq)


def test_reversed_elapsed_time_raises(fake):
    s = bc.Stream()
    start = s.record()
    time.sleep(0.002)
    end = s.record()
    end.synchronize()
    assert end.elapsed_ms(start) > 0
    assert end - start == pytest.approx(end.elapsed_ms(start))
    with pytest.raises(ValueError, match=r"end\.elapsed_ms\(start\)"):
        start.elapsed_ms(end)
    with pytest.raises(ValueError, match="reversed"):
        start - end


def test_closed_stream_refuses_every_method_before_the_driver(fake, ptx):
    s = bc.Stream()
    s.close()
    assert s.is_closed and s.handle_int == 0
    calls = [s.synchronize, s.synchronize_blocking, s.query, lambda: s.wait(bc.Event()), s.record,
             lambda: s.priority, lambda: s.non_blocking, s.__cuda_stream__, lambda: int(s),
             lambda: s.__enter__()]
    ev = bc.Event()
    for call in calls:
        with pytest.raises(ValueError, match="stream is closed"):
            call()
    recorded = fake.calls("cuEventRecord")
    with pytest.raises(ValueError, match="stream is closed"):
        ev.record(s)
    assert fake.calls("cuEventRecord") == recorded
    k = bc.Module.from_ptx(ptx.VADD).get_kernel("vadd")
    buf = bc.alloc(1024)
    launches = fake.launch_count()
    with pytest.raises(ValueError, match="stream is closed"):
        k.launch(1, 32, buf, buf, buf, 256, stream=s)
    assert fake.launch_count() == launches
    s.close()          # idempotent
    assert "closed" in repr(s)
    del buf, k


def test_closed_stream_makes_no_driver_call(fake):
    s = bc.Stream()
    s.close()
    driver = DriverCalls(fake)
    before = driver.total()
    for call in (s.synchronize, s.query, s.record, lambda: s.priority):
        with pytest.raises(ValueError, match="stream is closed"):
            call()
    assert driver.total() == before


def test_event_close_raises_on_failure_and_refuses_afterwards(fake):
    live = fake.live("event")
    ev = bc.Event()
    fake.fail("cuEventDestroy", 400)
    with pytest.raises(bc.CudaInvalidHandleError, match="cuEventDestroy"):
        ev.close()
    assert not ev.is_closed
    ev.close()
    assert ev.is_closed and fake.live("event") == live
    for call in (ev.query, ev.synchronize, ev.record, lambda: ev.elapsed_ms(ev)):
        with pytest.raises(ValueError, match="event is closed"):
            call()
    ev.close()         # idempotent


def test_event_destroy_failure_in_the_destructor_is_a_warning(fake):
    ev = bc.Event()
    fake.fail("cuEventDestroy", 400)
    with pytest.warns(bc.CudaWarning, match="cuEventDestroy"):
        del ev
        gc.collect()


class _BufferLike:
    ptr = 0x1000
    handle = 0x2000


@pytest.mark.parametrize("bad, exc", [(_BufferLike(), TypeError), (True, TypeError), (-5, ValueError),
                                      (1.5, TypeError), ("0", TypeError)])
def test_stream_argument_accepts_only_streams_handles_and_the_protocol(fake, bad, exc):
    ev = bc.Event()
    n = fake.calls("cuEventRecord")
    with pytest.raises(exc):
        ev.record(bad)
    with pytest.raises(exc):
        bc.Stream.from_handle(bad)
    assert fake.calls("cuEventRecord") == n


def test_priority_and_flags_are_asked_once(fake):
    s = bc.Stream(priority=-2, non_blocking=True)
    n = fake.calls("cuStreamGetPriority") + fake.calls("cuStreamGetFlags")
    for _ in range(10):
        assert s.priority == -2 and s.non_blocking is True
    assert fake.calls("cuStreamGetPriority") + fake.calls("cuStreamGetFlags") == n
    d = bc.Stream.default()
    assert d.priority == 0 and d.non_blocking is False
    w = bc.Stream.from_handle(s.handle_int)
    assert w.priority == -2 and w.non_blocking is True     # asked on first access...
    m = fake.calls("cuStreamGetPriority") + fake.calls("cuStreamGetFlags")
    assert w.priority == -2 and w.non_blocking is True     # ...and not again
    assert fake.calls("cuStreamGetPriority") + fake.calls("cuStreamGetFlags") == m


def test_context_handle_is_a_method(fake):
    d = bc.Device(0)
    h = d.context_handle()
    assert isinstance(h, int) and h != 0 and h == d.context_handle()


def test_close_hooks_run_before_the_stream_is_destroyed(fake):
    seen = []

    def hook(handle):
        seen.append((handle, fake.live("stream")))
    _stream.add_close_hook(hook)
    try:
        s = bc.Stream()
        h = s.handle_int
        live = fake.live("stream")
        s.close()
        assert seen == [(h, live)]            # called while the stream still existed
        s2 = bc.Stream()
        h2 = s2.handle_int
        del s2
        gc.collect()
        assert seen[-1][0] == h2
    finally:
        _stream._close_hooks.remove(hook)
    with pytest.raises(TypeError):
        _stream.add_close_hook(42)


_FORK_CHILD = r'''
import os
import barecuda as bc
from _helpers import DriverCalls
probe = DriverCalls(os.environ["BARECUDA_LIBCUDA"])

d = bc.Device(0)
s = bc.Stream(priority=-1)
s2 = bc.Stream()
w = bc.Stream.from_handle(s2.handle_int)
e1 = s.record()
e2 = s.record()
e2.synchronize()
_ = d.name


def calls():            # every stream, event and device method, called in the child
    return {
        "Stream.synchronize": s.synchronize, "Stream.synchronize(timeout)": lambda: s.synchronize(timeout=1),
        "Stream.synchronize_blocking": s.synchronize_blocking, "Stream.query": s.query,
        "Stream.wait(event)": lambda: s.wait(e1), "Stream.wait(stream)": lambda: s.wait(s2),
        "Stream.record": s.record, "Stream.close": s2.close, "Stream.priority": lambda: w.priority,
        "Event.record": e1.record, "Event.query": e1.query, "Event.synchronize": e1.synchronize,
        "Event.elapsed_ms": lambda: e2.elapsed_ms(e1), "Event.close": e1.close, "Event.__sub__": lambda: e2 - e1,
        "Event()": bc.Event, "Stream()": bc.Stream,
        "Device.set_current": d.set_current, "Device.attribute": lambda: d.attribute("warp_size"),
        "Device.attributes": d.attributes, "Device.mem_info": d.mem_info, "Device.synchronize": d.synchronize,
        "Device.can_access_peer": lambda: d.can_access_peer(0), "Device.enable_peer_access": lambda: d.enable_peer_access(0),
        "Device.stream_priority_range": d.stream_priority_range, "Device.context_handle": d.context_handle,
        "Device.name": lambda: d.name, "Device.__enter__": d.__enter__,
    }


print(probe.fork_refusals(calls, globals(), "s s2 w e1 e2",
                         after=lambda: (repr(d), repr(s), repr(e1))) or "ok")    # reprs stay usable, call nothing
'''


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_refuses_every_stream_event_and_device_method(fake_lib_path):
    """In a fresh interpreter (the fork must not copy pytest's threads): objects made
    before fork raise ForkedProcessError naming spawn, with zero driver calls, and
    their destructors leak silently."""
    out = run_child(_FORK_CHILD, fake_lib_path)
    assert out.strip() == "ok", out


_DEVICE_SCOPE = r'''
import threading, barecuda as bc
from _helpers import FakeCuda
import os
fake = FakeCuda(os.environ["BARECUDA_LIBCUDA"])
assert bc.device_count() == 2
assert bc.Device().ordinal == 0
with bc.Device(1) as d:
    assert d.ordinal == 1
    assert bc.Device().ordinal == 1 and bc.Stream().device.ordinal == 1
    assert fake.current_device() == 1
    with bc.Device(0):
        assert bc.Device().ordinal == 0 and fake.current_device() == 0
    assert bc.Device().ordinal == 1 and fake.current_device() == 1
    seen = []
    t = threading.Thread(target=lambda: seen.append(bc.Device().ordinal)); t.start(); t.join(30)
    assert seen == [0], seen          # a scope is per thread
assert bc.Device().ordinal == 0
bc.Device(1).set_current()
try:
    with bc.Device(0):
        raise KeyError("inside")
except KeyError:
    pass
assert bc.Device().ordinal == 1 and fake.current_device() == 1   # restored on an exception too
print("ok")
'''


def test_device_is_a_context_manager_that_restores_the_previous_device(fake_lib_path):
    out = run_child(_DEVICE_SCOPE, fake_lib_path, FAKECUDA_DEVICES=2)
    assert out.strip() == "ok", out


# ================================================== from a thread that never used barecuda
def test_stream_synchronize_and_query_from_a_fresh_thread(fake):
    """The double answers CUDA_ERROR_INVALID_CONTEXT with no current context; each call
    runs on a thread that never used barecuda (more above)."""
    s = bc.Stream()
    ev = s.record()
    errors, results = [], []

    def run(fn):
        try:
            results.append(fn())
        except BaseException as e:       # noqa: BLE001 -- reported below
            errors.append(e)
    for fn in (s.synchronize, s.query, ev.synchronize, ev.query, lambda: ev.record(s)):
        t = threading.Thread(target=run, args=(fn,), daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive()
    assert not errors, errors
    assert results[1] is True and results[3] is True


def test_event_destroy_failure_is_reported(fake):
    ev = bc.Event()
    fake.fail("cuEventDestroy", 400)
    with pytest.raises(bc.CudaError, match="cuEventDestroy"):
        ev.close()
    ev.close()
