"""The compile cache of kernels from source: an in-process memo and entries on disk.

Owns: where the cache lives (``cache_dir``, ``BARECUDA_CACHE_DIR``/``BARECUDA_CACHE``),
the checks that make a folder trusted (ours, not a link, not writable by others), its
size limit (``BARECUDA_CACHE_MAX_BYTES``) and LRU eviction, the entry format (header
with a SHA-256 of the payload, the entry's full key inside: a damaged or misplaced entry
is never loaded), atomic writes safe between processes, the key digest, the identity of
the compiler library, and the counters ``cache_info`` reports.

Pure Python and independent of the compiler: ``_program.Program`` decides what a key
is (``_compile_deps`` finds the headers it read from disk) and stores *records*, the
tuple ``(code, kind, arch, ptx, log, names, nvrtc_version)`` that ``ObjectCode._make``
takes; the memo keeps the objects made from them.

Trust (docs/security.md): entries are loaded only from a folder chain the cache opened
itself, component by component below the user's base folder, with ``O_NOFOLLOW``, and
checked with ``fstat`` on the open descriptor (no window between check and use); every
entry operation then goes through that descriptor (``dir_fd``). A folder that fails a
check turns the disk cache off, with one warning per folder per process.
"""
import errno
import hashlib
import os
import re
import stat
import struct
import sys
import threading
import time
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

from barecuda._errors import CudaWarning


class CompileCacheWarning(CudaWarning):
    """The compile cache refused its folder or could not write to it; compiles go on
    without the disk cache (``cache_info()['disabled']`` says why)."""


_FORMAT = b"BCNVRTC3"
_HEADER = struct.Struct("<8sQ32s")      # magic, payload length, sha256(payload)
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.bin\Z")
_TEMP_NAME = re.compile(r"\.tmp-[0-9a-f]{32}\.part\Z")
_MAX_ENTRY_BYTES = 256 << 20            # an entry larger than this is neither written nor read
_MAX_META_BYTES = 1 << 20
_KINDS = frozenset(("ptx", "cubin", "ltoir", "fatbin"))
_memo: dict = {}                        # in-process: key -> ObjectCode
_memo_lock = threading.Lock()
_stats = {"memory_hits": 0, "disk_hits": 0, "misses": 0, "corrupt": 0, "writes": 0, "evictions": 0,
          "skipped": 0}
_stats_lock = threading.Lock()          # the counts stay exact with threads (free-threaded builds too)
_skip_reason: list = [None]                 # why the last skipped compile did not use the disk cache
_warned: set = set()                    # (folder, what) warned about in this process
_DEFAULT_MAX_BYTES = 1 << 30


def _count(name):
    with _stats_lock:
        _stats[name] += 1

# descriptor-relative operations (POSIX): the checks hold for the folder we then use
_SECURE = (os.name == "posix" and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
           and os.open in os.supports_dir_fd and os.scandir in os.supports_fd)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_OPEN = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
_ENTRY_OPEN = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC | _BINARY
_TEMP_OPEN = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY


def _my_uid() -> int:
    """The owner the cache's folders and entries must have (the effective user)."""
    return os.geteuid()


def _locate() -> Optional[Tuple[str, Tuple[str, ...]]]:
    """``(base, parts)``: the cache is ``base/parts...``. ``base`` is the user's (followed
    as given); ``parts`` are the folders barecuda creates and checks, its own root first."""
    env = os.environ
    if "BARECUDA_CACHE_DIR" in env:
        d = env["BARECUDA_CACHE_DIR"]
        return (d, ("nvrtc",)) if d else None
    if env.get("BARECUDA_CACHE", "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    if sys.platform == "win32":
        base = env.get("LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), "AppData", "Local")
        return base, ("barecuda", "cache", "nvrtc")
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return base, ("barecuda", "nvrtc")


def cache_dir() -> Optional[str]:
    """The folder of the persistent compile cache, or None when it is turned off.

    ``BARECUDA_CACHE_DIR`` if set (empty: off); else ``BARECUDA_CACHE=0`` turns it off;
    else ``%LOCALAPPDATA%\\barecuda\\cache`` on Windows, ``$XDG_CACHE_HOME/barecuda`` or
    ``~/.cache/barecuda`` elsewhere. Compiled programs live in its ``nvrtc`` folder.
    The folders barecuda creates there are private (0700); one that is a symbolic link,
    belongs to another user or is writable by others is refused (see :func:`cache_info`).
    """
    loc = _locate()
    return None if loc is None else os.path.join(loc[0], *loc[1])


def _max_bytes() -> int:
    v = os.environ.get("BARECUDA_CACHE_MAX_BYTES")
    if v:
        try:
            return max(0, int(v))
        except ValueError:
            raise ValueError(f"BARECUDA_CACHE_MAX_BYTES={v!r}: expected a number of bytes") from None
    return _DEFAULT_MAX_BYTES


# ------------------------------------------------------------------ the folder
class _Refused(Exception):
    """A folder of the cache failed a trust check (the message says which and why)."""


class _Folder:
    """The cache folder, opened and checked; entry operations go through its descriptor."""
    __slots__ = ("path", "fd")

    def __init__(self, path, fd):
        self.path = path
        self.fd = fd              # None without descriptor-relative calls (Windows)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _at(self, name):
        return (name, {"dir_fd": self.fd}) if self.fd is not None else (os.path.join(self.path, name), {})

    def open(self, name, flags, mode=0o600):
        p, kw = self._at(name)
        return os.open(p, flags, mode, **kw)

    def unlink(self, name):
        p, kw = self._at(name)
        os.unlink(p, **kw)

    def replace(self, src, dst):
        if self.fd is not None:
            os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        else:
            os.replace(os.path.join(self.path, src), os.path.join(self.path, dst))

    def entries(self, pattern):
        """``[(mtime, size, name)]`` of the regular files whose names match ``pattern``."""
        out = []
        with os.scandir(self.fd if self.fd is not None else self.path) as it:
            for e in it:
                if pattern.match(e.name) and e.is_file(follow_symlinks=False):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    out.append((st.st_mtime, st.st_size, e.name))
        return out


def _check_folder(fd, where):
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise _Refused(f"{where} is not a folder")
    uid = _my_uid()
    if st.st_uid != uid:
        raise _Refused(f"{where} belongs to uid {st.st_uid}, not to this user (uid {uid})")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise _Refused(f"{where} is writable by group or others (mode {mode:04o}; "
                       "`chmod 700` it if only you could have written there)")
    if mode & 0o077:
        try:
            os.fchmod(fd, 0o700)  # ours and not writable by others: make it private
        except OSError:
            pass


def _open_folder(create: bool, warn: bool = True):
    """The cache folder, opened and checked, or None (off, or absent and not ``create``).

    Raises ``_Refused`` (after warning once per folder when ``warn``) when a folder from
    the cache's own root down fails a check, and OSError when it cannot be made or opened.
    """
    loc = _locate()
    if loc is None:
        return None
    base, parts = loc
    path = os.path.join(base, *parts)
    if not _SECURE:
        if create:
            os.makedirs(path, 0o700, exist_ok=True)
        elif not os.path.isdir(path):
            return None
        return _Folder(path, None)
    try:
        try:
            fd = os.open(base, _DIR_OPEN)
        except FileNotFoundError:
            if not create:
                return None
            os.makedirs(base, 0o700, exist_ok=True)
            fd = os.open(base, _DIR_OPEN)
        where = base
        try:
            for name in parts:
                where = os.path.join(where, name)
                try:
                    nfd = os.open(name, _DIR_OPEN | _NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        return None
                    try:
                        os.mkdir(name, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass
                    nfd = _open_component(name, fd, where)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise _Refused(_not_a_folder(name, fd, where)) from None
                    raise
                os.close(fd)
                fd = nfd
                _check_folder(fd, where)
        except BaseException:
            os.close(fd)
            raise
        return _Folder(path, fd)
    except _Refused as exc:
        if warn and (path, "refused") not in _warned:
            _warned.add((path, "refused"))
            warnings.warn(f"barecuda compile cache: {exc}; the disk cache is off for this folder "
                          "(compiles still work; see docs/security.md)", CompileCacheWarning, stacklevel=3)
        raise


def _open_component(name, fd, where):
    try:
        return os.open(name, _DIR_OPEN | _NOFOLLOW, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise _Refused(_not_a_folder(name, fd, where)) from None
        raise


def _not_a_folder(name, fd, where):
    try:
        if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            return f"{where} is a symbolic link (name the real folder in BARECUDA_CACHE_DIR)"
    except OSError:
        pass
    return f"{where} is not a folder"


# ------------------------------------------------------------------ public state
def cache_info() -> Dict[str, Any]:
    """State of the compile cache.

    Returns
    -------
    dict
        ``directory`` (None when off), ``entries``, ``bytes``, ``max_bytes``,
        ``memory_entries`` (in-process memo), ``disabled`` (why the disk cache refuses
        its folder, or None), ``skip_reason`` (why the last compile that could not use
        the disk cache skipped it, or None), and this process's counters
        ``memory_hits``, ``disk_hits``, ``misses``, ``corrupt``, ``writes``,
        ``evictions``, ``skipped``.
    """
    d = cache_dir()
    ents = []
    disabled = None
    try:
        f = _open_folder(False, warn=False)
    except _Refused as exc:
        f, disabled = None, str(exc)
    except OSError:
        f = None
    if f is not None:
        with f:
            ents = _listed(f)
    info = {"directory": d, "entries": len(ents), "bytes": sum(e[1] for e in ents),
            "max_bytes": _max_bytes(), "memory_entries": len(_memo), "disabled": disabled,
            "skip_reason": _skip_reason[0]}
    with _stats_lock:
        info.update(_stats)
    return info


def _folder_or_none():
    """The cache folder, opened (a context manager), or None when it is refused or cannot
    be opened (the callers then skip the disk)."""
    try:
        return _open_folder(False)
    except (_Refused, OSError):
        return None


def _listed(f):
    """The cache entries in folder f, or none when it cannot be listed."""
    try:
        return f.entries(_ENTRY_NAME)
    except OSError:
        return []


def clear_cache(memory: bool = True, disk: bool = True) -> int:
    """Empty the compile cache: the in-process memo and/or the on-disk entries.

    Only the cache's own entries (``<sha256>.bin`` regular files) in a folder that
    passes the checks are removed; nothing else in or under it is touched.

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
        f = _folder_or_none()
        if f is not None:
            with f:
                for _, _, name in _listed(f):
                    try:
                        f.unlink(name)
                        n += 1
                    except OSError:
                        pass
    return n


# ------------------------------------------------------------------ keys and entries
def key_blob(parts, headers) -> bytes:
    """The full key of a compile: length-prefixed ``parts`` (bytes) and the
    ``(name, source)`` header pairs. Entries carry it; its SHA-256 names them."""
    out = []
    for part in parts:
        out.append(struct.pack("<Q", len(part)))
        out.append(part)
    for hn, hsrc in headers:
        out.append(struct.pack("<QQ", len(hn), len(hsrc)))
        out.append(hn)
        out.append(hsrc)
    return b"".join(out)


def key_digest(parts, headers) -> str:
    """The entry name for a compile: SHA-256 of :func:`key_blob`."""
    return hashlib.sha256(key_blob(parts, headers)).hexdigest()


def file_identity(path: str) -> bytes:
    """Path, size, modification time and inode of a file (raises OSError)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    return f"{real}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_dev}".encode()


_lib_ids: Dict[str, bytes] = {}


def library_identity(path: str) -> bytes:
    """The identity of the compiler library at ``path`` as first seen by this process
    (the code that runs is the one loaded then): :func:`file_identity` of it and of
    NVRTC's built-in headers library beside it. ``nvrtcVersion`` alone gives only
    major.minor; this separates patch releases and rebuilt wheels."""
    ident = _lib_ids.get(path)
    if ident is None:
        parts = []
        try:
            parts.append(file_identity(path if os.path.isabs(path) else _mapped_path(path)))
            folder = os.path.dirname(os.path.realpath(path))
            for n in sorted(os.listdir(folder)):
                if "nvrtc-builtins" in n:
                    parts.append(file_identity(os.path.join(folder, n)))
        except OSError:
            parts.append(f"{path}\0unknown".encode())
        ident = _lib_ids.setdefault(path, b"\n".join(parts))
    return ident


def _mapped_path(name):
    """The file the dynamic loader mapped for the bare library name ``name`` (Linux)."""
    try:
        with open("/proc/self/maps", "rb") as fh:
            for line in fh.read().decode(errors="replace").splitlines():
                p = line.split(None, 5)[-1] if line.count(" ") >= 5 else ""
                b = os.path.basename(p)
                if p.startswith("/") and (b == name or b.startswith(name + ".")):
                    return p
    except OSError:
        pass
    return name                       # (then file_identity fails: the identity says 'unknown')


def pack_entry(record, key: bytes = b"") -> bytes:
    """The bytes of an entry for ``record`` (see the module docstring) under ``key``."""
    import json                       # (json only when the cache is used: import stays light)
    code, kind, arch, ptx, log, names, nvrtc_version = record
    meta = {"kind": kind, "arch": arch, "log": log, "names": names,
            "nvrtc": list(nvrtc_version) if nvrtc_version else None,
            "key": len(key), "code": len(code), "ptx": len(ptx) if ptx is not None else -1}
    mb = json.dumps(meta, sort_keys=True).encode()
    payload = struct.pack("<I", len(mb)) + mb + key + code + (ptx or b"")
    return _HEADER.pack(_FORMAT, len(payload), hashlib.sha256(payload).digest()) + payload


def _is_count(v, low=0):
    return type(v) is int and v >= low


def unpack_entry(data: bytes, key: Optional[bytes] = None):
    """The record in an entry's bytes, or None when anything is off: the header,
    the checksum, any field's type or size, or (given ``key``) the key it carries."""
    import json
    if len(data) < _HEADER.size + 4:
        return None
    magic, n, digest = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if magic != _FORMAT or n != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    try:
        (mlen,) = struct.unpack_from("<I", payload)
        if mlen > _MAX_META_BYTES or 4 + mlen > len(payload):
            return None
        meta = json.loads(payload[4:4 + mlen].decode())
        if type(meta) is not dict:
            return None
        get: Any = meta.get               # (fields of any type: each is checked below)
        klen, clen, plen = get("key"), get("code"), get("ptx")
        kind, arch, log, names, nv = get("kind"), get("arch"), get("log"), get("names"), get("nvrtc")
        if not (_is_count(klen) and _is_count(clen) and _is_count(plen, -1)):
            return None
        if 4 + mlen + klen + clen + max(plen, 0) != len(payload):
            return None
        if type(kind) is not str or kind not in _KINDS or type(arch) is not str or type(log) is not str:
            return None
        if type(names) is not dict or not all(type(v) is str for v in names.values()):
            return None
        if nv is not None and not (type(nv) is list and 2 <= len(nv) <= 4 and all(_is_count(x) for x in nv)):
            return None
        pos = 4 + mlen
        if key is not None and payload[pos:pos + klen] != key:
            return None
        pos += klen
        code = payload[pos:pos + clen]
        pos += clen
        ptx = payload[pos:pos + plen] if plen >= 0 else None
        return (code, kind, arch, ptx, log, names, tuple(nv) if nv else None)
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError, struct.error):
        return None                   # (json's errors are ValueErrors; deep nesting is a RecursionError)


# ------------------------------------------------------------------ lookups and stores
def memo_get(key):
    """The object memoized under ``key`` (counted as a memory hit), or None."""
    obj = _memo.get(key)
    if obj is not None:
        _count("memory_hits")
    return obj


def note_memory_hit() -> None:
    """Count a hit of a memo kept elsewhere (a program's own last results)."""
    _count("memory_hits")


def note_skip(reason: str) -> None:
    """Count a compile that could not use the cache, and remember why (``cache_info``)."""
    _count("skipped")
    _skip_reason[0] = reason


def disk_get(key, d, digest, make: Callable, keyblob: Optional[bytes] = None):
    """``make(*record)`` for the entry ``digest`` (whose full key is ``keyblob``, by
    default the digest itself) in the cache folder (memoized under ``key``), or None,
    counted as a miss, when there is none or ``d`` is None (the disk cache is off)."""
    if d is not None and _ENTRY_NAME.match(digest + ".bin"):
        f = _folder_or_none()
        if f is not None:
            with f:
                record = _disk_get(f, digest, keyblob if keyblob is not None else digest.encode())
            if record is not None:
                _count("disk_hits")
                obj = make(*record)
                with _memo_lock:
                    _memo[key] = obj
                return obj
    _count("misses")
    return None


def store(key, d, digest, obj, record, keyblob: Optional[bytes] = None) -> None:
    """Memoize ``obj`` under ``key`` and write ``record`` as entry ``digest`` (full key
    ``keyblob``) in the cache folder when ``d`` is not None. A folder that is refused
    or cannot be written warns once per folder and reason; it never raises."""
    with _memo_lock:
        _memo[key] = obj
    if d is None or not _ENTRY_NAME.match(digest + ".bin"):
        return
    try:
        f = _open_folder(True)
    except _Refused:
        return
    except OSError as exc:
        _warn_write(d, exc)
        return
    with f:
        try:
            _disk_put(f, digest, record, keyblob if keyblob is not None else digest.encode())
        except OSError as exc:
            _warn_write(f.path, exc)


def _warn_write(d, exc):
    # once per folder and error (a full disk would otherwise warn on every compile)
    what = exc.errno if exc.errno is not None else type(exc).__name__
    if (d, what) in _warned:
        return
    _warned.add((d, what))
    full = " (the disk is full; further failures here are not reported)" \
        if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)) else ""
    # stack: _warn_write, store, then (Cython frames are invisible) the caller of compile()
    warnings.warn(f"barecuda compile cache: cannot write to {d}: {exc}{full}", CompileCacheWarning,
                  stacklevel=3)


def _read_capped(fd, size):
    chunks, left = [], size + 1            # one byte more than fstat said: a file that grew is refused
    while left > 0:
        b = os.read(fd, min(left, 1 << 20))
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def _disk_get(f, digest, keyblob):
    name = digest + ".bin"
    try:
        fd = f.open(name, _ENTRY_OPEN)
    except FileNotFoundError:
        return None
    except OSError:
        _count("corrupt")       # a link or something unopenable: ignored, the next write replaces it
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _count("corrupt")   # a FIFO, a device, a folder: never read, never removed
            return None
        record = None
        if (not _SECURE or st.st_uid == _my_uid()) and st.st_size <= _MAX_ENTRY_BYTES:
            data = _read_capped(fd, st.st_size)
            if len(data) == st.st_size:
                record = unpack_entry(data, keyblob)
        if record is None:
            _count("corrupt")
            try:
                f.unlink(name)       # a regular file in our folder; replaced by the fresh compile that follows
            except OSError:
                pass
            return None
        try:
            os.utime(fd if os.utime in os.supports_fd else os.path.join(f.path, name))  # LRU: young again
        except OSError:
            pass
        return record
    finally:
        os.close(fd)


def _disk_put(f, digest, record, keyblob):
    data = pack_entry(record, keyblob)
    if len(data) > _MAX_ENTRY_BYTES:
        return
    tmp = f".tmp-{os.urandom(16).hex()}.part"
    fd = f.open(tmp, _TEMP_OPEN, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        f.replace(tmp, digest + ".bin")  # atomic: readers see all or nothing
    except BaseException:
        try:
            f.unlink(tmp)
        except OSError:
            pass
        raise
    _count("writes")
    _evict(f, _max_bytes())


def _evict(f, limit):
    ents = f.entries(_ENTRY_NAME)
    total = sum(e[1] for e in ents)
    if total > limit:
        ents.sort()                   # oldest use first
        for mtime, size, name in ents:
            if total <= limit:
                break
            try:
                f.unlink(name)
                total -= size
                _count("evictions")
            except OSError:
                pass
    # temporary files of writers that died long ago
    now = time.time()
    try:
        for mtime, _, name in f.entries(_TEMP_NAME):
            if now - mtime > 3600:
                f.unlink(name)
    except OSError:
        pass
