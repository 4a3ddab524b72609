"""Objects made before fork() refuse to work in the child (issue 9, item 8; "Required" 5).

In a child forked after the driver was loaded, every method of every object made
before the fork -- launches, plans, PlanList, launch_all, memset, copies, views, exports,
pools, graphs, modules -- raises ForkedProcessError naming ``spawn``, with zero driver
calls (the double's call counters); destructors leak silently. Streams, events and
devices: tests/core/test_device_stream.py. The child runs in a fresh interpreter, so the
fork does not copy pytest's threads."""
import sys

import pytest

from _helpers import run_child

_CHILD = r'''
import os
import barecuda as bc
from _helpers import DriverCalls
import ptx
probe = DriverCalls(os.environ["BARECUDA_LIBCUDA"])

m = bc.Module.from_ptx(ptx.VADD)
k = m.get_kernel("vadd")
s = bc.Stream()
b = bc.alloc(4096, stream=s)
c = bc.DriverAllocator(0).alloc(4096)
v = b.view("float32")
pool = bc.MemoryPool(0)
pp = bc.PinnedMemoryPool(0)
plan = k.bind(1, 32, b, b, b, 1, stream=s)
plans = bc.PlanList([plan])
pin = bc.PinnedBuffer(4096)
managed = bc.managed_empty(4096)
g = bc.Graph()
node = g.add_kernel(k, 1, 32, b, b, b, 1)
exe = g.instantiate()
cfg = bc.LaunchConfig(1, 32, stream=s)
glob = bc.Module.from_ptx(ptx.WITH_GLOBALS).get_global("counter")


def calls():            # every method of every object above, called in the child
    return {
        "Kernel.launch": lambda: k.launch(1, 32, b, b, b, 1, stream=s),
        "Kernel.launch (default stream)": lambda: k.launch(1, 32, b, b, b, 1),
        "Kernel.launch_config": lambda: k.launch_config(cfg, b, b, b, 1),
        "Kernel.bind": lambda: k.bind(1, 32, b, b, b, 1),
        "LaunchPlan()": plan, "LaunchPlan.launch": plan.launch, "LaunchPlan.set_arg": lambda: plan.set_arg(0, c),
        "PlanList()": plans, "launch_all": lambda: bc.launch_all([plan]),
        "Module.get_kernel": lambda: m.get_kernel("vadd"), "Global.read": glob.read,
        "Global.write": lambda: glob.write(b"\0" * 4),
        "DeviceBuffer.memset": lambda: b.memset(0), "DeviceBuffer.memset(stream)": lambda: b.memset(0, stream=s),
        "DeviceBuffer.copy_from(host)": lambda: b.copy_from(bytes(4096)),
        "DeviceBuffer.copy_from(device)": lambda: b.copy_from(c),
        "DeviceBuffer.copy_from(pinned, stream)": lambda: b.copy_from(pin, stream=s),
        "DeviceBuffer.copy_to": b.copy_to, "DeviceBuffer.to_numpy": b.to_numpy, "DeviceBuffer.copy": b.copy,
        "DeviceBuffer.view": lambda: b.view("int32"), "DeviceBuffer[a:b]": lambda: b[0:4],
        "view.copy_to": v.copy_to,
        "DeviceBuffer.__cuda_array_interface__": lambda: b.__cuda_array_interface__,
        "DeviceBuffer.__dlpack__": lambda: b.__dlpack__(stream=-1),
        "DeviceBuffer.prefetch": lambda: managed.prefetch(0),
        "as_device_buffer": lambda: bc.as_device_buffer(b.__cuda_array_interface__),
        "copy_2d": lambda: bc.copy_2d(b, c, 16, 2), "copy_3d": lambda: bc.copy_3d(b, c, 16, 2, 2),
        "MemoryPool.alloc": lambda: pool.alloc(64), "MemoryPool.trim": pool.trim,
        "PinnedMemoryPool.empty": lambda: pp.empty(64),
        "alloc": lambda: bc.alloc(64), "to_device": lambda: bc.to_device(b"x" * 8), "trim_memory": bc.trim_memory,
        "Graph.add_kernel": lambda: g.add_kernel(k, 1, 32, b, b, b, 1), "Graph.instantiate": g.instantiate,
        "GraphExec.launch": exe.launch, "KernelNode.set_arg": lambda: node.set_arg(0, c),
        "DeviceBuffer.close": c.close, "view.close": v.close, "PinnedBuffer.close": pin.close,
        "Module.close": m.close,
    }


print(probe.fork_refusals(calls, globals(), "k m s b c v pool pp plan plans pin managed g node exe cfg glob",
                         after=lambda: (repr(b), repr(plan), repr(pool), pool.stats())) or "ok")
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="os.fork semantics tested on Linux")
def test_forked_child_refuses_every_method_with_zero_driver_calls(fake_lib_path):
    out = run_child(_CHILD, fake_lib_path)
    assert out.strip() == "ok", out


# ================================================== launches, plans, streams, events and memory
_LAUNCH_MEMORY_CHILD = r'''
import os
import barecuda as bc
from _helpers import DriverCalls
import ptx
probe = DriverCalls(os.environ["BARECUDA_LIBCUDA"])
k = bc.Module.from_ptx(ptx.VADD).get_kernel("vadd")
s = bc.Stream()
ev = bc.Event()
b = bc.alloc(4096, stream=s)
plan = k.bind(1, 32, b, b, b, 1, stream=s)


def calls():            # the issue's list: launch, plans, launch_all, Stream.synchronize/query,
    return {                # Event.record/synchronize, memset; constructors and copies
        "Kernel.launch": lambda: k.launch(1, 32, b, b, b, 1, stream=s), "plan()": plan,
        "launch_all": lambda: bc.launch_all([plan]), "Stream.synchronize": s.synchronize, "Stream.query": s.query,
        "Event.record": lambda: ev.record(s), "Event.synchronize": ev.synchronize, "memset": lambda: b.memset(0),
        "Stream()": bc.Stream, "alloc": lambda: bc.alloc(16), "copy": lambda: b.copy_from(bytes(4096)),
        "close": b.close}


print(probe.fork_refusals(calls, globals(), "k s ev b plan") or "ok")
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="os.fork semantics tested on Linux")
def test_launch_stream_event_and_memory_entry_points_refuse_in_a_fork_child(fake_lib_path):
    """More entry points: tests/core/test_fork.py, tests/core/test_device_stream.py."""
    out = run_child(_LAUNCH_MEMORY_CHILD, fake_lib_path)
    assert out.strip() == "ok", out
