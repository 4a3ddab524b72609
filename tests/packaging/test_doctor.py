"""The doctor, ``python -m barecuda`` (src/barecuda/__main__.py), on the driver double:
each driver state is told apart, the settings, build, libraries and peers are
reported, ``--help``/``--json`` work and a closed pipe is not an error."""
import json
import os
import subprocess
import sys

import pytest

import barecuda
from barecuda import CudaError, DriverNotFoundError
from barecuda import __main__ as doctor
from _helpers import REPO



def run_doctor(fake_lib_path, *args, self_check=False, **env_extra):
    """The doctor on the double, whose kernels do not compute: without --no-self-check
    (self_check=True) its vector add fails, as it would on any such driver."""
    if not self_check:
        args = ("--no-self-check", *args)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKECUDA_", "CUDA_VISIBLE"))}
    env.update(
               BARECUDA_LIBCUDA=fake_lib_path)
    env.update({k: str(v) for k, v in env_extra.items()})
    return subprocess.run([sys.executable, "-m", "barecuda", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def doctor_json(fake_lib_path, **env_extra):
    p = run_doctor(fake_lib_path, "--json", "--no-bench", **env_extra)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return json.loads(p.stdout)


def test_ok_state_reports_everything(fake_lib_path):
    rep = doctor_json(fake_lib_path, BARECUDA_STAGING_THREADS=3, CUDA_VISIBLE_DEVICES=0)
    assert rep["state"]["state"] == "ok"
    assert rep["driver"]["path"] == fake_lib_path and rep["driver"]["cuda"] == "13.0"
    assert [d["name"] for d in rep["devices"]] == ["FakeCUDA Device 0"]
    assert rep["settings"]["BARECUDA_STAGING_THREADS"] == "3"
    assert rep["settings"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert rep["settings"]["BARECUDA_LIBCUDA"] == fake_lib_path
    assert set(rep["libraries"]) == {"nvrtc", "nvjitlink", "nccl", "cublaslt"}
    assert rep["build"].get("cython") or rep["build"].get("mode")
    assert "launch_overhead" not in rep          # --no-bench
    assert rep["self_check"] == {"ok": None, "message": "skipped (--no-self-check)"}


def test_the_self_check_does_not_know_the_double(fake_lib_path):
    """The doctor tells no test double apart: on the double, whose kernels do not
    compute, the self-check runs and fails (exit 1), as on any driver that misbehaves."""
    p = run_doctor(fake_lib_path, "--json", "--no-bench", self_check=True)
    rep = json.loads(p.stdout)
    assert rep["self_check"]["ok"] is False and rep["failed"] and p.returncode == 1, rep["self_check"]


def test_no_device_is_not_reported_as_no_driver(fake_lib_path):
    rep = doctor_json(fake_lib_path, FAKECUDA_DEVICES=0)
    assert rep["state"]["state"] == "no-device"
    assert "install" not in rep["state"]["fix"]
    p = run_doctor(fake_lib_path, "--no-bench", FAKECUDA_DEVICES=0, CUDA_VISIBLE_DEVICES=5)
    assert "state:        no-device" in p.stdout
    assert "CUDA_VISIBLE_DEVICES='5'" in p.stdout and "Install the NVIDIA driver" not in p.stdout.split("state:")[1]


def test_no_driver(fake_lib_path, tmp_path):
    rep = doctor_json(str(tmp_path / "libcuda-missing.so.1"))
    assert rep["state"]["state"] == "no-driver"
    assert "BARECUDA_LIBCUDA" in rep["state"]["fix"] and rep["devices"] == []


def test_driver_too_old_by_version(fake_lib_path):
    rep = doctor_json(fake_lib_path, FAKECUDA_DRIVER_VERSION=11040)
    assert rep["state"]["state"] == "driver-too-old"
    assert "11.4" in rep["state"]["message"] and "12.0" in rep["state"]["message"]


def test_driver_too_old_by_cuinit(fake_lib_path):
    # CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER (35, the runtime's cudaErrorInsufficientDriver, is no CUresult)
    rep = doctor_json(fake_lib_path, FAKECUDA_INIT_RESULT=int(barecuda._errors.CUresult.CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER))
    assert rep["state"]["state"] == "driver-too-old"


def test_driver_that_cannot_start(fake_lib_path):
    rep = doctor_json(fake_lib_path, FAKECUDA_INIT_RESULT=999)
    assert rep["state"]["state"] == "driver-error" and "999" in rep["state"]["message"]


def test_no_permission_on_device_nodes():
    """cuInit fails and /dev/nvidia* cannot be opened: the fix is permissions, not a
    driver install (the node list is given: the test may run as root)."""
    err = barecuda._errors.error_class(999)(999, "cuInit")
    nodes = [("/dev/nvidiactl", False), ("/dev/nvidia0", False), ("/dev/nvidia-uvm", True)]
    state, msg, fix = doctor.diagnose(err, nodes=nodes)
    assert state == "no-permission" and "2 device node" in msg
    assert "/dev/nvidiactl" in fix and "group" in fix
    no_dev = barecuda._errors.error_class(100)(100, "cuInit")
    assert doctor.diagnose(no_dev, nodes=nodes)[0] == "no-permission"
    assert doctor.diagnose(no_dev, nodes=[("/dev/nvidia0", True)])[0] == "no-device"
    # loaded, but zero devices and unreadable nodes
    assert doctor.diagnose(None, (13, 0), 0, nodes)[0] == "no-permission"
    assert doctor.diagnose(None, (13, 0), 2, nodes)[0] == "ok"


def test_diagnose_driver_not_found_variants():
    old = DriverNotFoundError("x", ["libcuda.so.1: opened, but it exports no cuGetProcAddress_v2 (...)"])
    assert doctor.diagnose(old)[0] == "driver-too-old"
    missing = DriverNotFoundError("x", ["libcuda.so.1: opened, but the required entry point cuX is missing "
                                        "(driver too old?)"])
    assert doctor.diagnose(missing)[0] == "driver-too-old"
    assert doctor.diagnose(DriverNotFoundError("x", ["libcuda.so.1: cannot open"]))[0] == "no-driver"
    assert doctor.diagnose(None, (11, 8), 1)[0] == "driver-too-old"
    assert isinstance(barecuda._errors.error_class(35)(35, "cuInit"), CudaError)


def test_library_search_honours_overrides(tmp_path):
    # the doctor asks the one finder (_libfind): an override that names nothing loadable is reported.
    # In a child interpreter: a library this process already opened (the NCCL double, when the
    # distributed tests ran first) is what the finder answers with from then on.
    code = ("import json; from barecuda import __main__ as doctor; "
            "print(json.dumps(doctor.find_library(*[x for x in doctor.LIBRARIES if x[0] == 'nccl'][0][1:])))")
    env = dict(os.environ, BARECUDA_NCCL=str(tmp_path / "libnccl.so.2"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["path"] is None and got["error"].startswith("not found (1 candidate(s) tried"), got
    assert "BARECUDA_NCCL=/path/to/libnccl.so.2" in got["fix"]


def test_peers_come_from_metadata_without_importing():
    before = set(sys.modules)
    peers = doctor.installed_peers()
    assert not {"torch", "cupy", "cuda"} & (set(sys.modules) - before)
    try:
        from importlib.metadata import version
        assert peers.get("numpy") == version("numpy")
    except Exception:   # noqa: BLE001 -- numpy not installed: nothing to compare
        assert "numpy" not in peers


def test_build_info_read_defensively(monkeypatch):
    import types
    mod = types.ModuleType("barecuda._build_info")
    mod.BUILD = {"mode": "debug", "cython": "3.1.0"}
    monkeypatch.setitem(sys.modules, "barecuda._build_info", mod)
    assert doctor.build_info() == {"mode": "debug", "cython": "3.1.0", "source": "barecuda._build_info"}
    monkeypatch.setitem(sys.modules, "barecuda._build_info", None)     # not generated by this build
    info = doctor.build_info()
    assert info["source"] == "compiled module" and "mode" in info


def test_help_does_not_run_the_checks(fake_lib_path):
    p = run_doctor(fake_lib_path, "--help")
    assert p.returncode == 0 and "--json" in p.stdout and "state:" not in p.stdout


def test_text_report_names_the_facts(fake_lib_path):
    p = run_doctor(fake_lib_path, BARECUDA_ALLOCATOR="driver")
    assert p.returncode == 0, p.stderr
    for label in ("build:", "settings:", "peers:", "driver:", "state:", "NVRTC:", "nvJitLink:", "NCCL:", "cuBLASLt:", "nvidia.ko:", "status:"):
        assert label in p.stdout
    assert "BARECUDA_ALLOCATOR=driver" in p.stdout
    assert "launch overhead:" in p.stdout       # through the public barecuda.bench API


def test_doctor_uses_only_the_public_bench_api():
    src = open(doctor.__file__).read()
    assert "from barecuda.bench import quick_launch_overhead" in src
    assert "barecuda.bench." not in src.replace("barecuda.bench.quick_launch_overhead", "")


def test_closed_pipe_is_not_an_error(fake_lib_path):
    env = dict(os.environ, BARECUDA_LIBCUDA=fake_lib_path,
               PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-m", "barecuda", "--no-bench", "--no-self-check"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    p.stdout.close()                # the reader is gone before the first line
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_topology_is_shown(fake_lib_path):
    p = run_doctor(fake_lib_path, "--no-bench", FAKECUDA_DEVICES="2")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "topology:" in out and "2 devices" in out and "peer access (row reads column)" in out
    rep = doctor_json(fake_lib_path, FAKECUDA_DEVICES="2")
    t = rep["topology"]
    assert len(t["devices"]) == 2 and len(t["access_matrix"]) == 2
    assert t["access_matrix"][0][1] == (1 if t["p2p"][0][1]["access"] else 0)
