"""The compile cache of kernels from source: an in-process memo and entries on disk.

Owns: where the cache lives (``cache_dir``, ``BARECUDA_CACHE_DIR``/``BARECUDA_CACHE``),
its size limit (``BARECUDA_CACHE_MAX_BYTES``) and LRU eviction, the entry format
(header with a SHA-256 of the payload: a damaged entry is never loaded), atomic
writes safe between processes, the key digest, and the counters ``cache_info`` reports.

Pure Python and independent of the compiler: ``_program.Program`` decides what a key
is and stores *records*, the tuple ``(code, kind, arch, ptx, log, names, nvrtc_version)``
that ``ObjectCode._make`` takes; the memo keeps the objects made from them.
"""
import hashlib
import os
import struct
import sys
import threading
import time
import warnings

from barecuda._errors import CudaWarning

_FORMAT = b"BCNVRTC2"
_HEADER = struct.Struct("<8sQ32s")      # magic, payload length, sha256(payload)
_memo: dict = {}                        # in-process: key -> ObjectCode
_memo_lock = threading.Lock()
_stats = {"memory_hits": 0, "disk_hits": 0, "misses": 0, "corrupt": 0, "writes": 0, "evictions": 0}
_DEFAULT_MAX_BYTES = 1 << 30


def cache_dir():
    """The folder of the persistent compile cache, or None when it is turned off.

    ``BARECUDA_CACHE_DIR`` if set (empty: off); else ``BARECUDA_CACHE=0`` turns it off;
    else ``%LOCALAPPDATA%\\barecuda\\cache`` on Windows, ``$XDG_CACHE_HOME/barecuda`` or
    ``~/.cache/barecuda`` elsewhere. Compiled programs live in its ``nvrtc`` folder.
    """
    env = os.environ
    if "BARECUDA_CACHE_DIR" in env:
        d = env["BARECUDA_CACHE_DIR"]
        return os.path.join(d, "nvrtc") if d else None
    if env.get("BARECUDA_CACHE", "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    if sys.platform == "win32":
        base = env.get("LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), "AppData", "Local")
        return os.path.join(base, "barecuda", "cache", "nvrtc")
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "barecuda", "nvrtc")


def _max_bytes():
    v = os.environ.get("BARECUDA_CACHE_MAX_BYTES")
    if v:
        try:
            return max(0, int(v))
        except ValueError:
            raise ValueError(f"BARECUDA_CACHE_MAX_BYTES={v!r}: expected a number of bytes") from None
    return _DEFAULT_MAX_BYTES


def _entries_of(d):
    out = []
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.name.endswith(".bin") and e.is_file():
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    out.append((st.st_mtime, st.st_size, e.path))
    except FileNotFoundError:
        pass
    return out


def cache_info():
    """State of the compile cache.

    Returns
    -------
    dict
        ``directory`` (None when off), ``entries``, ``bytes``, ``max_bytes``,
        ``memory_entries`` (in-process memo), and this process's counters
        ``memory_hits``, ``disk_hits``, ``misses``, ``corrupt``, ``writes``, ``evictions``.
    """
    d = cache_dir()
    ents = _entries_of(d) if d else []
    info = {"directory": d, "entries": len(ents), "bytes": sum(e[1] for e in ents),
            "max_bytes": _max_bytes(), "memory_entries": len(_memo)}
    info.update(_stats)
    return info


def clear_cache(memory=True, disk=True):
    """Empty the compile cache: the in-process memo and/or the on-disk entries.

    Returns
    -------
    int
        Number of disk entries removed.
    """
    n = 0
    if memory:
        with _memo_lock:
            _memo.clear()
    if disk:
        d = cache_dir()
        if d:
            for _, _, path in _entries_of(d):
                try:
                    os.unlink(path)
                    n += 1
                except OSError:
                    pass
    return n


# ------------------------------------------------------------------ keys and entries
def key_digest(parts, headers):
    """The entry name for a compile: SHA-256 over length-prefixed ``parts`` (bytes) and
    the ``(name, source)`` header pairs."""
    h = hashlib.sha256()
    for part in parts:
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    for hn, hsrc in headers:
        h.update(struct.pack("<QQ", len(hn), len(hsrc)))
        h.update(hn)
        h.update(hsrc)
    return h.hexdigest()


def pack_entry(record):
    """The bytes of an entry for ``record`` (see the module docstring)."""
    import json                       # (json and tempfile only when the cache is used: import stays light)
    code, kind, arch, ptx, log, names, nvrtc_version = record
    meta = {"kind": kind, "arch": arch, "log": log, "names": names,
            "nvrtc": list(nvrtc_version) if nvrtc_version else None,
            "code": len(code), "ptx": len(ptx) if ptx is not None else -1}
    mb = json.dumps(meta, sort_keys=True).encode()
    payload = struct.pack("<I", len(mb)) + mb + code + (ptx or b"")
    return _HEADER.pack(_FORMAT, len(payload), hashlib.sha256(payload).digest()) + payload


def unpack_entry(data):
    """The record in an entry's bytes, or None when anything is off."""
    import json
    if len(data) < _HEADER.size:
        return None
    magic, n, digest = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if magic != _FORMAT or n != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    try:
        (mlen,) = struct.unpack_from("<I", payload)
        meta = json.loads(payload[4:4 + mlen].decode())
        pos = 4 + mlen
        code = payload[pos:pos + meta["code"]]
        pos += meta["code"]
        ptx = payload[pos:pos + meta["ptx"]] if meta["ptx"] >= 0 else None
        if len(code) != meta["code"] or (ptx is not None and len(ptx) != meta["ptx"]):
            return None
        return (code, meta["kind"], meta["arch"], ptx, meta["log"], meta["names"],
                tuple(meta["nvrtc"]) if meta["nvrtc"] else None)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


# ------------------------------------------------------------------ lookups and stores
def memo_get(key):
    """The object memoized under ``key`` (counted as a memory hit), or None."""
    obj = _memo.get(key)
    if obj is not None:
        _stats["memory_hits"] += 1
    return obj


def note_memory_hit():
    """Count a hit of a memo kept elsewhere (a program's own last results)."""
    _stats["memory_hits"] += 1


def disk_get(key, d, digest, make):
    """``make(*record)`` for the entry ``digest`` in folder ``d`` (memoized under
    ``key``), or None, counted as a miss, when there is none or ``d`` is None."""
    if d is not None:
        record = _disk_get(d, digest)
        if record is not None:
            _stats["disk_hits"] += 1
            obj = make(*record)
            with _memo_lock:
                _memo[key] = obj
            return obj
    _stats["misses"] += 1
    return None


def store(key, d, digest, obj, record):
    """Memoize ``obj`` under ``key`` and write ``record`` as entry ``digest`` in ``d``
    (when ``d`` is not None). A folder that cannot be written warns; it never raises."""
    with _memo_lock:
        _memo[key] = obj
    if d is not None:
        _disk_put(d, digest, record)


def _disk_get(d, digest):
    path = os.path.join(d, digest + ".bin")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    record = unpack_entry(data)
    if record is None:
        _stats["corrupt"] += 1
        try:
            os.unlink(path)          # replaced by the fresh compile that follows
        except OSError:
            pass
        return None
    try:
        os.utime(path)               # LRU: a hit makes the entry young again
    except OSError:
        pass
    return record


def _disk_put(d, digest, record):
    import tempfile
    try:
        os.makedirs(d, exist_ok=True)
        data = pack_entry(record)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(d, digest + ".bin"))    # atomic: readers see all or nothing
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _stats["writes"] += 1
        _evict(d, _max_bytes())
    except OSError as exc:
        # stack: _disk_put, store, then (Cython frames are invisible) the caller of compile()
        warnings.warn(f"barecuda compile cache: cannot write to {d}: {exc}", CudaWarning, stacklevel=3)


def _evict(d, limit):
    ents = _entries_of(d)
    total = sum(e[1] for e in ents)
    if total <= limit:
        return
    ents.sort()                       # oldest use first
    for mtime, size, path in ents:
        if total <= limit:
            break
        try:
            os.unlink(path)
            total -= size
            _stats["evictions"] += 1
        except OSError:
            pass
    # temporary files of writers that died long ago
    now = time.time()
    try:
        for e in os.scandir(d):
            if e.name.startswith(".tmp-") and now - e.stat().st_mtime > 3600:
                os.unlink(e.path)
    except OSError:
        pass
