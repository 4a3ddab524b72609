"""Messages say what happened in the user's words: a copy between dtypes is a dtype
mismatch, and the doctor shows library versions beside their paths, the kernel module,
aligned columns and no internal names."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import barecuda as bc
from barecuda import __main__ as doctor


@pytest.mark.parametrize("direction", ["from_host", "to_host", "dev_to_dev"])
def test_dtype_mismatch_is_named_as_such(fake, direction):
    b = bc.empty(16, "float32")
    with pytest.raises(ValueError, match=r"^dtype mismatch: destination is (float32|float64) \(\d+ bytes\), "
                                         r"source is (float32|float64)"):
        if direction == "from_host":
            b.copy_from(np.zeros(16, np.float64))
        elif direction == "to_host":
            b.copy_to(np.zeros(16, np.float64))
        else:
            bc.empty(16, "float64").copy_from(b)


def test_size_mismatch_of_one_dtype_stays_a_size_mismatch(fake):
    b = bc.empty(16, "float32")
    with pytest.raises(ValueError, match="^size mismatch: destination has 64 bytes, source 60"):
        b.copy_from(np.zeros(15, np.float32))
    with pytest.raises(ValueError, match="^size mismatch"):
        b.copy_from(bytes(10))                      # no dtype on the host side


def _doctor(fake_lib_path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKECUDA_", "CUDA_VISIBLE"))}
    env.update(BARECUDA_LIBCUDA=fake_lib_path, BARECUDA_NCCL="/nonexistent/libnccl.so.2")
    # --no-self-check: the double's kernels do not compute (the doctor does not know it is one)
    return subprocess.run([sys.executable, "-m", "barecuda", "--no-bench", "--no-self-check", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_doctor_columns_versions_and_no_internal_names(fake_lib_path):
    p = _doctor(fake_lib_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "(search)" not in out and "barecuda._" not in out.split("\n", 1)[1]
    labelled = [ln for ln in out.splitlines()[1:] if re.match(r"^[A-Za-z][\w. -]*:", ln)]
    assert len(labelled) > 8
    for ln in labelled:
        label, rest = ln.split(":", 1)
        assert len(label) + 1 <= doctor.W and rest.startswith(" ") and rest[doctor.W - len(label) - 1] != " ", ln
    assert re.search(r"^nvidia\.ko: +\S", out, re.M)
    for title in ("NVRTC", "nvJitLink", "NCCL", "cuBLASLt"):
        assert re.search(rf"^{title}: +\S", out, re.M), title
    nccl = re.search(r"^NCCL: +(.*)\n +fix: (.*)$", out, re.M)
    assert nccl and nccl.group(1).startswith("not found") and "nvidia-nccl-cu13" in nccl.group(2)


def test_doctor_json_has_versions(fake_lib_path):
    rep = json.loads(_doctor(fake_lib_path, "--json").stdout)
    assert "kernel_module" in rep
    for key, info in rep["libraries"].items():
        assert set(info) in ({"name", "path", "version"}, {"name", "path", "error", "fix"}), (key, info)
        if info["path"]:
            assert info["version"] is None or re.fullmatch(r"\d+(\.\d+)*", info["version"]), info


def test_kernel_module_version_is_read(tmp_path):
    f = tmp_path / "version"
    f.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
                 "(dvs-builder@U16-I2-C05-3-1)  Tue Sep 23 09:39:10 UTC 2025\nGCC version:  gcc 12\n")
    assert doctor.kernel_module_version(str(f)) == "580.95.05"
    f.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n")
    assert doctor.kernel_module_version(str(f)) == "535.183.01"
    assert doctor.kernel_module_version(str(tmp_path / "missing")) is None


def test_library_version_from_the_file_name(tmp_path):
    real = tmp_path / "libcublasLt.so.13.1.0.3"
    real.write_bytes(b"")
    link = tmp_path / "libcublasLt.so.13"
    link.symlink_to(real.name)
    assert doctor._version_from_file(str(link)) == (13, 1, 0, 3)
    assert doctor._version_from_file(str(tmp_path / "libfakecuda.so")) is None
