"""The one library finder (_libfind): every library barecuda opens at run time is found,
described and advised alike -- the driver, NVRTC, nvJitLink, NCCL and cuBLASLt."""
import os
import sys
import types

import pytest

import barecuda as bc
from barecuda import _libfind, _loader
import barecuda.nccl as nccl


def test_one_table_names_every_library():
    assert [s.title for s in _libfind.LIBRARIES] == ["the CUDA driver", "NVRTC", "nvJitLink", "NCCL", "cuBLASLt"]
    assert {s.env for s in _libfind.LIBRARIES} == {
        "BARECUDA_LIBCUDA", "BARECUDA_NVRTC", "BARECUDA_NVJITLINK", "BARECUDA_NCCL", "BARECUDA_CUBLASLT"}
    assert _libfind.CUBLASLT.linux == ("libcublasLt.so.13", "libcublasLt.so.12")
    assert _libfind.CUBLASLT.packages == {13: ("nvidia-cublas", None), 12: ("nvidia-cublas-cu12", None)}
    assert not hasattr(nccl, "_wheel_dirs"), "NCCL has its own finder again"


@pytest.mark.parametrize("spec", _libfind.LIBRARIES, ids=lambda s: s.env)
def test_every_not_found_message_has_one_wording(spec, tmp_path, monkeypatch):
    monkeypatch.delenv(spec.env, raising=False)
    msg = _libfind.describe(spec, [f"{tmp_path}/x.so: cannot open"])
    lines = msg.splitlines()
    assert lines[0] == f"Could not load {spec.title} ({spec.file_name}). Tried:"
    assert lines[1] == f"  - {tmp_path}/x.so: cannot open"
    assert lines[2].startswith("Folders searched: " if spec.folders else "Searched: ")
    assert "LD_LIBRARY_PATH" in lines[2]
    assert lines[3].startswith("To fix: ") and lines[3].endswith(f"{spec.env}=/path/to/{spec.file_name}")


def test_folders_searched_are_listed(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    monkeypatch.setattr(_libfind, "site_dirs", lambda: [str(site)])
    monkeypatch.delenv("BARECUDA_NVRTC", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    msg = _libfind.describe(_libfind.NVRTC, [])
    assert str(site / "nvidia" / "cu13" / "lib") in msg
    assert str(site / "nvidia" / "cuda_nvrtc" / "lib") not in msg      # only folders that exist


def test_override_may_be_a_folder(tmp_path, monkeypatch):
    (tmp_path / "libnvJitLink.so.12").write_bytes(b"")
    monkeypatch.setenv("BARECUDA_NVJITLINK", str(tmp_path))
    assert _libfind.candidates(_libfind.NVJITLINK) == [str(tmp_path / "libnvJitLink.so.12")]
    msg = _libfind.describe(_libfind.NVJITLINK, ["x: no"])
    assert "Only BARECUDA_NVJITLINK was tried" in msg


def test_advice_follows_the_driver(monkeypatch):
    a12 = _libfind.install_advice(_libfind.NVRTC, 12)
    assert "nvidia-cuda-nvrtc-cu12" in a12 and '".[nvrtc-cu12]"' in a12 and "(CUDA 13)" not in a12
    a13 = _libfind.install_advice(_libfind.NCCL, 13)
    assert "nvidia-nccl-cu13" in a13 and "cu12" not in a13
    both = _libfind.install_advice(_libfind.NVJITLINK, None)
    assert "nvidia-nvjitlink`" in both and "nvidia-nvjitlink-cu12" in both
    assert _libfind.install_advice(_libfind.NVJITLINK, 11) == both       # unknown major: every supported one
    assert "nvidia-smi" in _libfind.install_advice(_libfind.DRIVER, 13)


def test_driver_major_never_loads_a_driver():
    # the test double is not loaded by this test module's imports alone
    if not _loader._state()["loaded"]:
        assert _libfind.driver_cuda_major() is None
        assert not _loader._state()["loaded"]


def _fake_pathfinder(monkeypatch, result):
    cuda = types.ModuleType("cuda")
    cuda.__path__ = []
    pf = types.ModuleType("cuda.pathfinder")
    asked = []

    def load_nvidia_dynamic_lib(name):
        asked.append(name)
        if isinstance(result, Exception):
            raise result
        return types.SimpleNamespace(abs_path=result)
    pf.load_nvidia_dynamic_lib = load_nvidia_dynamic_lib
    cuda.pathfinder = pf
    monkeypatch.setitem(sys.modules, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", pf)
    return asked


def test_cuda_pathfinder_is_asked_first(tmp_path, monkeypatch):
    lib = tmp_path / "libnvrtc.so.12"
    lib.write_bytes(b"")
    asked = _fake_pathfinder(monkeypatch, str(lib))
    monkeypatch.delenv("BARECUDA_NVRTC", raising=False)
    c = _libfind.candidates(_libfind.NVRTC)
    assert asked == ["nvrtc"] and c[0] == str(lib)
    assert c[-1] == "libnvrtc.so"                        # our own search follows


def test_cuda_pathfinder_failure_falls_back(monkeypatch):
    asked = _fake_pathfinder(monkeypatch, RuntimeError("DynamicLibNotFoundError"))
    monkeypatch.delenv("BARECUDA_NCCL", raising=False)
    assert _libfind.pathfinder_path(_libfind.NCCL) is None
    assert asked == ["nccl"]
    assert "libnccl.so.2" in _libfind.candidates(_libfind.NCCL)


def test_override_skips_pathfinder_and_driver_never_asks_it(monkeypatch, tmp_path):
    asked = _fake_pathfinder(monkeypatch, str(tmp_path / "nope"))
    monkeypatch.setenv("BARECUDA_NVRTC", "/x/libnvrtc.so.13")
    assert _libfind.candidates(_libfind.NVRTC) == ["/x/libnvrtc.so.13"]
    monkeypatch.delenv("BARECUDA_LIBCUDA", raising=False)
    assert _libfind.candidates(_libfind.DRIVER) == list(_libfind.DRIVER.patterns)
    assert asked == []


def test_every_not_found_error_shares_one_base():
    base = bc.LibraryNotFoundError
    assert bc.DriverNotFoundError.__mro__[1] is base
    from barecuda._errors import _LibraryNotFoundError
    assert _LibraryNotFoundError is base          # the old private name, an alias for one release
    for cls in (bc.DriverNotFoundError, bc.CompilerNotFoundError, nccl.NcclNotFoundError):
        assert issubclass(cls, base) and issubclass(cls, OSError) and issubclass(cls, bc.BarecudaError)
    e = nccl.NcclNotFoundError("m", ["a: b"])
    assert e.tried == ("a: b",)


def test_nccl_and_driver_use_the_shared_finder(monkeypatch, tmp_path):
    monkeypatch.setenv("BARECUDA_NCCL", str(tmp_path / "libnccl.so.2"))
    assert nccl.candidates() == _libfind.candidates(_libfind.NCCL) == [str(tmp_path / "libnccl.so.2")]
    monkeypatch.setenv("BARECUDA_LIBCUDA", "/x/libcuda.so.1")
    assert list(_loader.candidates()) == ["/x/libcuda.so.1"]
