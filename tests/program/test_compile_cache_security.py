"""The compile cache trusts nothing on disk (issue 21, defects 1-4 and the full-disk warning).

Real NVRTC (the nvidia-cuda-nvrtc wheel) compiles on any machine, so each case compiles a
real program. An "attacker" is simulated: as root the tests hand folders and files to
uid 65534 (``nobody``) with ``os.chown``; otherwise they make the cache compare with a
different uid. Cases that could hang or fill memory on a broken cache (a FIFO, a symlink
to /dev/zero) run in a child process with a time and memory limit.
"""
import errno
import hashlib
import json
import os
import stat
import struct
import subprocess
import sys
import textwrap
import warnings

import pytest

import barecuda as bc
from barecuda import _compile_cache, _program

pytestmark = [
    pytest.mark.skipif(not _program.nvrtc_available(), reason="NVRTC not found (pip install nvidia-cuda-nvrtc)"),
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX ownership and permissions"),
]

SRC = 'extern "C" __global__ void k(int *o) { o[0] = 4242; }'
NOBODY = 65534
_HEADER = struct.Struct("<8sQ32s")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("BARECUDA_CACHE_DIR", str(root))
    bc.clear_cache(disk=False)
    yield root / "nvrtc"
    bc.clear_cache(disk=False)


def _entries(d):
    return sorted(p for p in d.iterdir() if p.name.endswith(".bin"))


def _plant(monkeypatch, code=b"// PLANTED\n"):
    """Write the entry for SRC with a payload of our choosing (the cache's own writer
    makes it, so it is valid by every check that looks only at the file's bytes)."""
    real = _program.nvrtc_compile

    def fake(src, name, headers, opts, names, kind):
        out, ptx, log, lowered = real(src, name, headers, opts, names, kind)
        return code, code, log, lowered
    monkeypatch.setattr(_program, "nvrtc_compile", fake)
    bc.Program(SRC).compile("ptx", arch=90)
    monkeypatch.setattr(_program, "nvrtc_compile", real)
    bc.clear_cache(disk=False)


def _as_other_user(monkeypatch, *paths):
    """Make ``paths`` belong to someone else: chown as root, else a different own uid."""
    if os.geteuid() == 0:
        for p in paths:
            os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
    else:
        me = os.geteuid()
        monkeypatch.setattr(_compile_cache, "_my_uid", lambda: me + 1, raising=False)


def _compile_quietly():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        oc = bc.Program(SRC).compile("ptx", arch=90)
    return oc, [x for x in w if issubclass(x.category, bc.CudaWarning)]


# ------------------------------------------------------------------ defect 1: planted entries
def test_cache_folders_are_created_0700(cache):
    bc.Program(SRC).compile("ptx", arch=90)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    (entry,) = _entries(cache)
    assert stat.S_IMODE(os.stat(entry).st_mode) & 0o077 == 0


@pytest.mark.parametrize("how", ["foreign_owner", "group_writable", "other_writable", "symlink"])
def test_planted_entry_in_an_untrusted_folder_is_never_loaded(cache, tmp_path, monkeypatch, how):
    _plant(monkeypatch)
    (entry,) = _entries(cache)
    if how == "foreign_owner":
        _as_other_user(monkeypatch, cache, entry)
    elif how == "group_writable":
        os.chmod(cache, 0o770)
    elif how == "other_writable":
        os.chmod(cache, 0o1777)
    else:                                    # the attacker's folder, linked in at the cache's path
        theirs = tmp_path / "theirs"
        os.rename(cache, theirs)
        os.symlink(theirs, cache)
    oc, warned = _compile_quietly()
    assert b"PLANTED" not in oc.code and b"4242" in oc.code
    assert len(warned) == 1 and "compile cache" in str(warned[0].message)
    info = bc.cache_info()
    assert info["disabled"] and str(cache) in info["disabled"]
    # warned once per folder, not per compile; nothing written into the refused folder
    bc.clear_cache(disk=False)
    n_before = len(os.listdir(cache))
    oc, warned = _compile_quietly()
    assert b"4242" in oc.code and not warned
    assert len(os.listdir(cache)) == n_before


def test_refused_parent_up_to_the_cache_root(tmp_path, monkeypatch):
    """$XDG_CACHE_HOME/barecuda is the cache's root: a planted root is refused too."""
    xdg = tmp_path / "xdg"
    monkeypatch.delenv("BARECUDA_CACHE_DIR", raising=False)
    monkeypatch.delenv("BARECUDA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    bc.clear_cache(disk=False)
    _plant(monkeypatch)
    root = xdg / "barecuda"
    os.chmod(root, 0o777)                    # the nvrtc folder below it is fine, the root is not
    oc, warned = _compile_quietly()
    assert b"PLANTED" not in oc.code and len(warned) == 1
    assert str(root) in bc.cache_info()["disabled"]
    bc.clear_cache(disk=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_entry_owned_by_someone_else_is_not_loaded(cache, monkeypatch):
    _plant(monkeypatch)
    (entry,) = _entries(cache)
    os.chown(entry, NOBODY, NOBODY)
    oc, warned = _compile_quietly()
    assert b"PLANTED" not in oc.code and not warned
    assert os.stat(entry).st_uid == 0        # replaced by our own fresh entry


def test_entry_under_another_key_is_not_loaded(cache):
    bc.Program(SRC).compile("ptx", arch=90)
    (a,) = _entries(cache)
    other = 'extern "C" __global__ void k(int *o) { o[0] = 777; }'
    bc.Program(other).compile("ptx", arch=90)
    (b,) = [p for p in _entries(cache) if p != a]
    os.replace(a, b)                         # SRC's entry at the other program's name
    bc.clear_cache(disk=False)
    c0 = bc.cache_info()["corrupt"]
    oc = bc.Program(other).compile("ptx", arch=90)
    assert b"777" in oc.code and b"4242" not in oc.code
    assert bc.cache_info()["corrupt"] == c0 + 1


def test_oversized_entry_is_not_read(cache, monkeypatch):
    bc.Program(SRC).compile("ptx", arch=90)
    (entry,) = _entries(cache)
    monkeypatch.setattr(_compile_cache, "_MAX_ENTRY_BYTES", 64, raising=False)
    bc.clear_cache(disk=False)
    h0 = bc.cache_info()["disk_hits"]
    bc.Program(SRC).compile("ptx", arch=90)
    assert bc.cache_info()["disk_hits"] == h0


# ------------------------------------------------------------------ defect 2: eviction and clear_cache
@pytest.mark.parametrize("op", ["evict", "clear"])
def test_symlinked_cache_folder_never_loses_the_victims_files(cache, tmp_path, monkeypatch, op):
    victim = tmp_path / "models"
    victim.mkdir()
    (victim / "weights.bin").write_bytes(b"w" * 4096)
    (victim / ("0" * 64 + ".bin")).write_bytes(b"x" * 4096)     # even an entry-shaped name
    cache.parent.mkdir()
    os.symlink(victim, cache)
    if op == "evict":
        monkeypatch.setenv("BARECUDA_CACHE_MAX_BYTES", "1")
    _compile_quietly()
    if op == "clear":
        bc.clear_cache()
    assert sorted(os.listdir(victim)) == sorted(["weights.bin", "0" * 64 + ".bin"])


def test_clear_and_evict_touch_only_entry_names(cache, monkeypatch):
    bc.Program(SRC).compile("ptx", arch=90)
    (cache / "weights.bin").write_bytes(b"w" * 4096)           # a user's file that is not an entry
    (cache / "notes.txt").write_bytes(b"n")
    monkeypatch.setenv("BARECUDA_CACHE_MAX_BYTES", "1")
    bc.Program('extern "C" __global__ void k2(int *o) { o[0] = 2; }').compile("ptx", arch=90)
    assert (cache / "weights.bin").exists()
    assert bc.clear_cache() >= 0
    assert sorted(os.listdir(cache)) == ["notes.txt", "weights.bin"]


# ------------------------------------------------------------------ defect 3: stale kernels
HDR_PROG = '#include "val.h"\nextern "C" __global__ void k(int *o) { o[0] = VAL; }\n'


def _write(p, text):
    p.write_text(text)
    st = os.stat(p)                          # a different mtime even on a coarse clock
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize("where", ["include_path", "cwd", "nested", "pre_include", "angle"])
def test_header_edit_recompiles(cache, tmp_path, monkeypatch, where):
    inc = tmp_path / "inc"
    inc.mkdir()
    kw = {}
    src = HDR_PROG
    hdr = inc / "val.h"
    if where == "include_path":
        kw["include_paths"] = [str(inc)]
    elif where == "cwd":
        monkeypatch.chdir(inc)
    elif where == "nested":
        kw["include_paths"] = [str(inc)]
        (inc / "val.h").write_text('#include "deep/inner.h"\n')
        (inc / "deep").mkdir()
        hdr = inc / "deep" / "inner.h"
    elif where == "pre_include":
        kw["include_paths"] = [str(inc)]
        kw["options"] = ["--pre-include=val.h"]
        src = 'extern "C" __global__ void k(int *o) { o[0] = VAL; }\n'
    else:
        kw["include_paths"] = [str(inc)]
        src = HDR_PROG.replace('"val.h"', "<val.h>")
    _write(hdr, "#define VAL 13579\n")
    p = bc.Program(src, **kw)
    assert b"13579" in p.compile("ptx", arch=90).code
    _write(hdr, "#define VAL 24680\n")
    assert b"24680" in p.compile("ptx", arch=90).code              # the program's own memo
    assert b"24680" in bc.Program(src, **kw).compile("ptx", arch=90).code   # the process memo
    _write(hdr, "#define VAL 97531\n")
    bc.clear_cache(disk=False)
    assert b"97531" in bc.Program(src, **kw).compile("ptx", arch=90).code   # the disk
    _write(hdr, "#define VAL 13579\n")                                  # back: a disk hit again
    bc.clear_cache(disk=False)
    h0 = bc.cache_info()["disk_hits"]
    assert b"13579" in bc.Program(src, **kw).compile("ptx", arch=90).code
    assert bc.cache_info()["disk_hits"] == h0 + 1


def test_new_header_earlier_in_the_search_path_recompiles(cache, tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / "val.h").write_text("#define VAL 11111\n")
    kw = {"include_paths": [str(a), str(b)]}
    p = bc.Program(HDR_PROG, **kw)
    assert b"11111" in p.compile("ptx", arch=90).code
    (a / "val.h").write_text("#define VAL 22222\n")                   # now found first
    assert b"22222" in p.compile("ptx", arch=90).code
    bc.clear_cache(disk=False)
    assert b"22222" in bc.Program(HDR_PROG, **kw).compile("ptx", arch=90).code


def test_header_edited_during_the_compile_is_not_cached(cache, tmp_path, monkeypatch):
    inc = tmp_path / "inc"
    inc.mkdir()
    hdr = inc / "val.h"
    _write(hdr, "#define VAL 61001\n")
    real = _program.nvrtc_compile

    def edit_meanwhile(*a):
        _write(hdr, "#define VAL 61002\n")            # after the key was made, before NVRTC reads it
        return real(*a)
    monkeypatch.setattr(_program, "nvrtc_compile", edit_meanwhile)
    p = bc.Program(HDR_PROG, include_paths=[str(inc)])
    assert b"61002" in p.compile("ptx", arch=90).code
    monkeypatch.setattr(_program, "nvrtc_compile", real)
    assert not cache.exists() or not _entries(cache)   # its key (the old header) does not match its output
    _write(hdr, "#define VAL 61001\n")                # back: nothing was remembered under this content
    assert b"61001" in p.compile("ptx", arch=90).code
    bc.clear_cache(disk=False)
    assert b"61001" in bc.Program(HDR_PROG, include_paths=[str(inc)]).compile("ptx", arch=90).code


def test_computed_include_skips_the_disk_cache(cache, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "val.h").write_text("#define VAL 31337\n")
    src = '#define HDR "val.h"\n#include HDR\nextern "C" __global__ void k(int *o) { o[0] = VAL; }\n'
    oc = bc.Program(src, include_paths=[str(inc)]).compile("ptx", arch=90)
    assert b"31337" in oc.code
    assert not cache.exists() or not _entries(cache)
    info = bc.cache_info()
    assert info["skipped"] >= 1 and "#include" in info["skip_reason"]
    (inc / "val.h").write_text("#define VAL 31338\n")
    bc.clear_cache(disk=False)                  # (the memo cannot see that header either)
    assert b"31338" in bc.Program(src, include_paths=[str(inc)]).compile("ptx", arch=90).code
    assert not _entries(cache) if cache.exists() else True


def test_computed_include_keeps_the_memo_keyed_on_found_headers(cache, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "val.h").write_text("#define VAL 4001\n")
    (inc / "other.h").write_text("#define OTHER 1\n")
    src = ('#include "val.h"\n#define HDR "other.h"\n#include HDR\n'
           'extern "C" __global__ void k(int *o) { o[0] = VAL + OTHER; }\n')
    p = bc.Program(src, include_paths=[str(inc)])
    a = p.compile("ptx", arch=90)
    assert b"4002" in a.code and p.compile("ptx", arch=90) is a      # memo: no recompile per call
    _write(inc / "val.h", "#define VAL 5001\n")                       # a header the scan found
    assert b"5002" in p.compile("ptx", arch=90).code
    assert not cache.exists() or not _entries(cache)


def test_in_memory_headers_are_in_the_key(cache):
    a = bc.Program(HDR_PROG, headers={"val.h": "#define VAL 5551\n"}).compile("ptx", arch=90)
    b = bc.Program(HDR_PROG, headers={"val.h": "#define VAL 5552\n"}).compile("ptx", arch=90)
    assert b"5551" in a.code and b"5552" in b.code


def test_nvrtc_identity_change_is_a_miss(cache, monkeypatch):
    bc.Program(SRC).compile("ptx", arch=90)
    bc.clear_cache(disk=False)
    h0, m0 = bc.cache_info()["disk_hits"], bc.cache_info()["misses"]
    monkeypatch.setattr(_compile_cache, "library_identity", lambda path: b"another nvrtc build",
                        raising=False)
    bc.Program(SRC).compile("ptx", arch=90)
    assert (bc.cache_info()["disk_hits"], bc.cache_info()["misses"]) == (h0, m0 + 1)


def test_library_identity_follows_the_file(tmp_path):
    lib = tmp_path / "libnvrtc.so.13"
    lib.write_bytes(b"a" * 100)
    one = _compile_cache.file_identity(str(lib))
    lib.write_bytes(b"b" * 101)
    assert _compile_cache.file_identity(str(lib)) != one
    real = _compile_cache.library_identity(_program.nvrtc_path())        # the real one, builtins too
    assert real.count(b"\n") >= 1 and b"nvrtc-builtins" in real     # one or more builtins files beside it
    if sys.platform.startswith("linux"):      # NVRTC found by the loader under its bare name
        path = _program.nvrtc_path()
        assert _compile_cache._mapped_path(os.path.basename(path)) == os.path.realpath(path)


# ------------------------------------------------------------------ defect 4: entries that hang or break
def _child_compile(env_dir, timeout=45):
    code = textwrap.dedent(f"""
        import resource, os
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        import barecuda as bc
        oc = bc.Program({SRC!r}).compile("ptx", arch=90)
        print("OK" if b"4242" in oc.code else "WRONG")
    """)
    env = dict(os.environ, BARECUDA_CACHE_DIR=str(env_dir))
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("compile() hung on a planted entry")


@pytest.mark.parametrize("what", ["fifo", "dev_zero", "directory"])
def test_special_file_at_an_entry_path_neither_hangs_nor_breaks(cache, what):
    bc.Program(SRC).compile("ptx", arch=90)
    (entry,) = _entries(cache)
    os.unlink(entry)
    if what == "fifo":
        os.mkfifo(entry)
    elif what == "dev_zero":
        os.symlink("/dev/zero", entry)
    else:
        os.mkdir(entry)
    r = _child_compile(cache.parent)
    assert r.returncode == 0 and r.stdout.split() == ["OK"], r.stderr[-2000:]
    if what != "directory":
        assert stat.S_ISREG(os.lstat(entry).st_mode)               # replaced by a real entry


def _reforge(path, edit):
    """Rewrite an entry's JSON header with ``edit(meta_bytes)`` and a valid checksum."""
    data = path.read_bytes()
    magic, n, _ = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    (mlen,) = struct.unpack_from("<I", payload)
    meta = edit(payload[4:4 + mlen])
    payload = struct.pack("<I", len(meta)) + meta + payload[4 + mlen:]
    path.write_bytes(_HEADER.pack(magic, len(payload), hashlib.sha256(payload).digest()) + payload)


def _set(field, value):
    def edit(mb):
        m = json.loads(mb)
        m[field] = value
        return json.dumps(m).encode()
    return edit


@pytest.mark.parametrize("edit", [
    lambda mb: b"[" * 200000 + b"]" * 200000,                        # RecursionError in json
    _set("names", [1, 2]),
    _set("log", 5),
    _set("kind", 7),
    _set("arch", ["sm_90"]),
    _set("code", "12"),
    _set("code", -5),
    _set("ptx", 10 ** 12),
    _set("nvrtc", {"a": 1}),
    lambda mb: b"{}",
    lambda mb: b"\xff\xfe",
], ids=["deep", "names", "log", "kind", "arch", "code_str", "code_neg", "ptx_huge", "nvrtc", "empty", "utf8"])
def test_malformed_entry_with_a_valid_checksum_is_corrupt_and_removed(cache, edit):
    bc.Program(SRC).compile("ptx", arch=90)
    (entry,) = _entries(cache)
    _reforge(entry, edit)
    bc.clear_cache(disk=False)
    c0 = bc.cache_info()["corrupt"]
    oc = bc.Program(SRC).compile("ptx", arch=90)
    assert b"4242" in oc.code
    assert bc.cache_info()["corrupt"] == c0 + 1
    assert _compile_cache.unpack_entry(entry.read_bytes()) is not None   # replaced by a good one


# ------------------------------------------------------------------ leftover: a full disk
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_full_disk_warns_once_per_folder(cache, tmp_path, monkeypatch, code):
    def full(*a, **k):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(os, "replace", full)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(4):
            bc.Program(f'extern "C" __global__ void k(int *o) {{ o[0] = {i}; }}').compile("ptx", arch=90)
    assert len([x for x in w if issubclass(x.category, bc.CudaWarning)]) == 1
    # another folder warns once for itself
    monkeypatch.setenv("BARECUDA_CACHE_DIR", str(tmp_path / "other"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(2):
            bc.Program(f'extern "C" __global__ void k(int *o) {{ o[0] = {10 + i}; }}').compile("ptx", arch=90)
    assert len([x for x in w if issubclass(x.category, bc.CudaWarning)]) == 1
