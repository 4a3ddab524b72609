"""Device.enable_peer_access / disable_peer_access on the driver double with two
devices (a child process: FAKECUDA_DEVICES is read when the double loads)."""
from _helpers import run_child

_CHILD = r'''
import ctypes, os
import barecuda as bc
from _helpers import FakeCuda
fake = FakeCuda(os.environ["BARECUDA_LIBCUDA"])
lib = fake.lib
lib.cuCtxDisablePeerAccess.argtypes = [ctypes.c_void_p]
lib.cuCtxDisablePeerAccess.restype = ctypes.c_int

def raw_disable():
    # 0 when device 0's context had access to device 1 (and drops it); 705 when not.
    pctx = bc.Device(1).context_handle()
    bc.Device(0).context_handle()                  # device 0's context current
    return lib.cuCtxDisablePeerAccess(pctx)

assert bc.device_count() == 2
d0 = bc.Device(0)
d0.enable_peer_access(1)
d0.enable_peer_access(1)                           # idempotent
d0.disable_peer_access(1)
assert raw_disable() == 705                        # really disabled
d0.disable_peer_access(1)                          # idempotent: not enabled is fine
d0.enable_peer_access(1)
assert raw_disable() == 0                          # really enabled again
print("ok")
'''


def test_disable_undoes_enable(fake_lib_path):
    out = run_child(_CHILD, fake_lib_path, FAKECUDA_DEVICES=2)
    assert out.strip() == "ok", out
