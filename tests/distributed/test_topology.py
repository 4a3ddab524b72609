"""barecuda._topology: device list, P2P report, DevicePool (CPU on the driver double;
the `gpu` tests compare with the driver on a real machine)."""
import json
import os
import subprocess
import sys

import pytest

import barecuda as bc



def test_one_device(fake):
    devs = bc.devices()
    assert [d.ordinal for d in devs] == list(range(bc.device_count()))
    t = bc.topology()
    assert len(t["devices"]) == len(devs)
    d0 = t["devices"][0]
    assert d0["uuid"] == devs[0].uuid and d0["pci_bus_id"] == devs[0].pci_bus_id
    assert t["access_matrix"][0][0] == 1 and t["p2p"][0][0]["performance_rank"] == 0
    assert "1 device" in bc.topology_report(t) and devs[0].uuid in bc.topology_report(t)
    json.dumps(t)


def test_device_pool_single(fake):
    pool = bc.DevicePool()
    assert len(pool) == bc.device_count()
    assert [pool.next().ordinal for _ in range(3)] == [0, 0, 0]
    b = pool.alloc(256)
    assert b.device.ordinal == 0 and b.nbytes == 256
    assert pool.best().ordinal == 0
    assert pool.allocator(0) is bc.get_allocator(0)


def test_device_pool_arguments(fake):
    with pytest.raises(ValueError, match="twice"):
        bc.DevicePool([0, 0])
    with pytest.raises(ValueError, match="at least one"):
        bc.DevicePool([])


def test_peer_copy_loop_checks(fake):
    from barecuda._topology import peer_copy_loop
    a, b = bc.alloc(64), bc.alloc(128)
    with pytest.raises(ValueError, match="does not fit"):
        peer_copy_loop(a, b, 100, 1)
    with pytest.raises(ValueError, match="iters"):
        peer_copy_loop(a, b, 64, -1)
    peer_copy_loop(b, a, 64, 5)
    assert fake.calls("cuMemcpyPeerAsync") == 5


TWO_DEVICES = r"""
import json, barecuda as bc
t = bc.topology()
pool = bc.DevicePool()
free = {d.ordinal: d.mem_info()[0] for d in pool}
big = bc.alloc(1 << 30, device=0)          # device 0 now has less free memory
ranked = [d.ordinal for d in pool.ranked()]
rr = [pool.next().ordinal for _ in range(5)]
placed = [pool.alloc(64).device.ordinal for _ in range(4)]
print(json.dumps({"t": t, "ranked": ranked, "rr": rr, "placed": placed, "report": bc.topology_report(t)}))
"""


def test_two_devices_in_subprocess(fake_lib_path):
    env = dict(os.environ, BARECUDA_LIBCUDA=fake_lib_path, FAKECUDA_DEVICES="2",
               PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", TWO_DEVICES], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    t = out["t"]
    assert [d["ordinal"] for d in t["devices"]] == [0, 1]
    assert t["access_matrix"] == [[1, 1], [1, 1]]
    assert t["p2p"][0][1] == {"access": True, "performance_rank": 0, "native_atomics": True, "array_access": True}
    assert out["ranked"] == [1, 0]
    assert out["rr"] == [0, 1, 0, 1, 0]
    assert out["placed"] == [1, 0, 1, 0]
    assert "2 devices" in out["report"] and "peer access" in out["report"]


@pytest.mark.gpu
def test_topology_matches_driver():
    t = bc.topology()
    n = bc.device_count()
    assert len(t["devices"]) == n
    for i in range(n):
        for j in range(n):
            if i != j:
                assert bool(t["access_matrix"][i][j]) == bc.Device(i).can_access_peer(j)
    for d, info in zip(bc.devices(), t["devices"]):
        free, total = d.mem_info()
        assert info["total_memory"] == total
        assert info["pci_bus_id"] == d.pci_bus_id
    assert str(n) in bc.topology_report(t)


@pytest.mark.gpu
def test_peer_copy_matches_numpy():
    np = pytest.importorskip("numpy")
    if bc.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    from barecuda._topology import peer_copy_loop
    x = np.random.default_rng().standard_normal(1 << 20).astype(np.float32)
    a = bc.to_device(x, device=0)
    b = bc.empty(x.shape, "float32", device=1)
    s = bc.Stream(1)
    peer_copy_loop(b, a, a.nbytes, 3, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(b.to_numpy(), x)
    c = bc.empty(x.shape, "float32", device=1)
    c.copy_from(a)
    np.testing.assert_array_equal(c.to_numpy(), x)
