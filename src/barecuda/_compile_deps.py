"""The headers a compile reads from disk, so that the compile cache's key covers them.

Owns: scanning CUDA C++ text for ``#include`` (and ``__has_include``) names, the
search that NVRTC does for them (the including file's folder, ``-I``/
``--include-path`` folders, ``--pre-include`` headers, the current directory), and the
content hashes of the files found, recursively. The search is a superset: every folder
NVRTC might look in is probed, and every file found counts, so a header edited, added
earlier in the path or removed changes the key. Headers NVRTC carries itself
(``cuda_fp16.h``...) are not on disk; the NVRTC library's identity covers them.

A name that cannot be resolved without running the preprocessor (``#include MACRO``)
keeps the compile off the disk cache: :meth:`Deps.resolve` says why (the in-process
memo still keys on the headers that were found). Scans and hashes are
remembered per file identity (inode, size, times), so a repeated compile costs one
``stat`` per probed path.
"""
import hashlib
import os
import re
import stat

_DIRECTIVE = re.compile(rb"^[ \t]*#[ \t]*(?:include_next|include|import)\b[ \t]*(.*)$", re.M)
_HAS_INCLUDE = re.compile(rb"__has_include(?:_next)?[ \t]*\([ \t]*(\"[^\"\n]*\"|<[^>\n]*>)")
_NAME = re.compile(rb"\"([^\"\n]*)\"|<([^>\n]*)>")
_MAX_FILES = 20000
_PCH = ("--use-pch", "-use-pch", "--pch-dir", "-pch-dir", "--create-pch", "-create-pch")
_file_memo: dict = {}                    # (path, identity) -> (sha256, includes, computed)


def scan(text):
    """``(includes, computed)``: the ``(quoted, name)`` pairs ``text`` includes (or
    tests with ``__has_include``), and the first include whose name is computed (bytes)
    or None."""
    if b"include" not in text and b"import" not in text:
        return [], None               # (the common case, without a regular expression)
    text = text.replace(b"\\\r\n", b"").replace(b"\\\n", b"")
    incs, computed = [], None
    for m in _DIRECTIVE.finditer(text):
        arg = m.group(1)
        n = _NAME.match(arg)
        if n is None:
            if computed is None:
                computed = arg.strip()[:80]
            continue
        incs.append((n.group(1) is not None, n.group(1) if n.group(1) is not None else n.group(2)))
    for m in _HAS_INCLUDE.finditer(text):
        a = m.group(1)
        incs.append((a[:1] == b'"', a[1:-1]))
    return incs, computed


def _options(options):
    """``(include folders, pre-includes, reason)`` from NVRTC option strings."""
    dirs, pre = [], []
    it = iter(options)
    for o in it:
        if o.startswith("--include-path="):
            dirs.append(o[len("--include-path="):])
        elif o in ("-I", "--include-path"):
            dirs.append(next(it, ""))
        elif o.startswith("-I"):
            dirs.append(o[3:] if o.startswith("-I=") else o[2:])
        elif o.startswith("--pre-include="):
            pre.append(o[len("--pre-include="):])
        elif o.startswith("-include="):
            pre.append(o[len("-include="):])
        elif o in ("--pre-include", "-include"):
            pre.append(next(it, ""))
        elif o.startswith(_PCH):
            return dirs, pre, f"option {o!r} reads or writes precompiled headers"
    return dirs, pre, None


class Deps:
    """What a program includes from disk; :meth:`resolve` finds the files now."""
    __slots__ = ("name", "texts", "dirs", "pre", "reason")

    def __init__(self, name, texts, dirs, pre, reason):
        self.name = name
        self.texts = texts        # [(folder of the text, relative to the cwd; includes)]
        self.dirs = dirs
        self.pre = pre
        self.reason = reason

    def resolve(self):
        """``(deps, reason)``: a tuple of ``(absolute path, sha256)`` of every header on
        disk the compile may read that can be found, and None; or, when some cannot be
        known (a computed ``#include``), what was found and why the rest cannot be."""
        reason = self.reason
        cwd = os.getcwd()
        dirs = [os.path.join(cwd, d) for d in self.dirs]
        found = {}
        work = []
        for folder, incs in self.texts:
            here = os.path.join(cwd, folder)
            work.extend((here, q, n) for q, n in incs)
        work.extend((cwd, True, os.fsencode(p)) for p in self.pre)
        seen = set()
        while work:
            here, quoted, inc = work.pop()
            if (here, quoted, inc) in seen:
                continue
            seen.add((here, quoted, inc))
            name = os.fsdecode(inc)
            if os.path.isabs(name):
                cands = (name,)
            else:
                cands = ([here] if quoted else []) + dirs + [cwd]
                cands = [os.path.normpath(os.path.join(c, name)) for c in cands]
            for p in cands:
                if p in found:
                    continue
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                ident = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                memo = _file_memo.get((p, ident))
                if memo is None:
                    try:
                        with open(p, "rb") as fh:
                            data = fh.read()
                    except OSError as exc:
                        reason = reason or f"cannot read the header {p}: {exc.strerror}"
                        continue
                    incs, computed = scan(data)
                    memo = (hashlib.sha256(data).digest(), incs, computed)
                    if len(_file_memo) > 4 * _MAX_FILES:
                        _file_memo.clear()
                    _file_memo[(p, ident)] = memo
                digest, incs, computed = memo
                if computed is not None and reason is None:
                    reason = f"{p} has a computed #include {os.fsdecode(computed)!r}"
                found[p] = digest
                if len(found) > _MAX_FILES:
                    return tuple(sorted(found.items())), f"more than {_MAX_FILES} headers"
                folder = os.path.dirname(p)
                work.extend((folder, q, n) for q, n in incs)
        return tuple(sorted(found.items())), reason


def prepare(src, name, headers, options):
    """The :class:`Deps` of a program, or None when it reads nothing from disk (no
    include anywhere, no pre-include): then the key needs nothing more."""
    if not headers and not options and b"include" not in src and b"import" not in src:
        return None                   # the common case, at the cost of two byte searches
    texts = []
    reason = None
    for origin, text in [(name, src)] + [(os.fsdecode(hn), hs) for hn, hs in headers]:
        incs, computed = scan(text)
        if computed is not None and reason is None:
            reason = f"{origin} has a computed #include {os.fsdecode(computed)!r}"
        if incs:
            texts.append((os.path.dirname(origin), incs))
    dirs, pre, why = _options(options)
    reason = reason or why
    if not texts and not pre and reason is None:
        return None
    return Deps(name, texts, dirs, pre, reason)
