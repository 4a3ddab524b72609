"""``LaunchConfig`` against the fake driver: the launch attributes it records (cluster,
priority, cooperative, programmatic serialization), their validation against the kernel
and device, and its argument checks."""
import pytest

import barecuda as bc
from barecuda import LaunchConfig, Module
from _helpers import ref_pack, no_launch


# ------------------------------------------------------------ LaunchConfig
def test_launch_config_attributes_recorded(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    s = bc.Stream()
    cfg = LaunchConfig((4, 2), (32, 2), shared_mem=64, stream=s, cluster=(2, 2), priority=-1,
                       programmatic_serialization=True)
    assert cfg.cluster == (2, 2, 1) and cfg.grid == (4, 2, 1)
    k.launch_config(cfg, 1, 2, 3, 4)
    rec = fake.last_launch()
    assert rec.kind == "ex"
    assert (rec.grid, rec.block, rec.shared, rec.stream) == ((4, 2, 1), (32, 2, 1), 64, s.handle_int)
    assert rec.cluster == (2, 2, 1) and rec.priority == -1 and rec.programmatic_serialization == 1
    assert not rec.cooperative and rec.num_attrs == 3
    assert rec.params == ref_pack(["u64", "u64", "u64", "u32"], [1, 2, 3, 4])
    plan = k.bind_config(cfg, 5, 6, 7, 8)
    plan()
    rec2 = fake.last_launch()
    assert rec2.kind == "ex" and rec2.cluster == (2, 2, 1) and rec2.params == ref_pack(
        ["u64", "u64", "u64", "u32"], [5, 6, 7, 8])
    bc.PlanList([plan, k.bind(1, 1, 0, 0, 0, 0)])()
    assert fake.last_launch(1).kind == "ex" and fake.last_launch(0).kind == "kernel"
    coop = LaunchConfig(2, 64, cooperative=True)
    k.launch_config(coop, 1, 2, 3, 4)
    rec = fake.last_launch()
    assert rec.cooperative and rec.num_attrs == 1 and rec.kind == "ex"


def test_cluster_validation(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    args = (0, 0, 0, 1)
    no_launch(fake, lambda: k.launch_config(LaunchConfig(3, 32, cluster=2), *args), ValueError, "divisible")
    no_launch(fake, lambda: k.launch_config(LaunchConfig(16, 32, cluster=16), *args), ValueError,
              "non_portable_cluster_size_allowed")
    k.set_attribute("non_portable_cluster_size_allowed", 1)
    no_launch(fake, lambda: k.launch_config(LaunchConfig(32, 32, cluster=32), *args), ValueError, "16")
    k.launch_config(LaunchConfig(16, 32, cluster=16), *args)
    assert fake.last_launch().cluster == (16, 1, 1)
    k2 = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    fake.set_attribute(0, 75, 8)     # compute capability 8.x: no clusters
    no_launch(fake, lambda: k2.launch_config(LaunchConfig(2, 32, cluster=2), *args), ValueError, "cluster")


def test_cooperative_validation(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    per_sm = k.max_active_blocks_per_sm(256)
    sms = bc.Device(0).attribute("multiprocessor_count")
    assert per_sm > 0 and sms > 0
    k.launch_config(LaunchConfig(per_sm * sms, 256, cooperative=True), 0, 0, 0, 1)
    no_launch(fake, lambda: k.launch_config(LaunchConfig(per_sm * sms + 1, 256, cooperative=True), 0, 0, 0, 1),
              ValueError, "co-residency", str(per_sm * sms))
    k2 = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    fake.set_attribute(0, 95, 0)
    no_launch(fake, lambda: k2.launch_config(LaunchConfig(1, 32, cooperative=True), 0, 0, 0, 1),
              ValueError, "cooperative")


def test_launch_config_argument_checks(fake):
    with pytest.raises(ValueError):
        LaunchConfig(0, 1)
    with pytest.raises(ValueError):
        LaunchConfig(1, (1, 1, 1, 1))
    with pytest.raises(ValueError):
        LaunchConfig(2, 1, cluster=0)
    with pytest.raises(TypeError):
        LaunchConfig(1, 1, stream="nope")
    assert "cooperative=True" in repr(LaunchConfig(1, 1, cooperative=True))
