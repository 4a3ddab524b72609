"""Device, Stream and Event: on the driver test double (CPU) and on a real GPU."""
import _thread
import gc
import pickle
import threading
import time

import pytest

import barecuda as bc
from barecuda import _device

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
    t = threading.Thread(target=other)
    t.start()
    t.join()
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

    class TorchLike:
        cuda_stream = owner.handle_int

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
    s = bc.Stream()
    fake.fail("cuStreamQuery", NOT_READY, times=-1)   # "the GPU never finishes"
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            s.synchronize()
    finally:
        timer.cancel()
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
    import os
    import subprocess
    import sys
    code = r'''
import threading, barecuda as bc
assert bc.device_count() == 2
s1 = bc.Stream(1)                      # barecuda binds device 1's context internally...
assert bc.Device().ordinal == 0        # ...which must not change the default device
bc.Device(1).set_current()
assert bc.Device().ordinal == 1 and bc.Stream().device.ordinal == 1
seen = []
t = threading.Thread(target=lambda: seen.append(bc.Device().ordinal)); t.start(); t.join()
assert seen == [0], seen               # the choice is per thread
print("ok")
'''
    env = dict(os.environ, BARECUDA_LIBCUDA=fake_lib_path, FAKECUDA_DEVICES="2")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
