"""CUDA graphs: host nodes.

Owns: the C trampoline the driver calls for a host node (``noexcept``; takes the GIL,
never runs while the interpreter finalizes or after a fork) and the store of the
exceptions host-node callables raise: kept (up to 1000, then counted), raised by
``check_host_errors`` (which ``GraphExec.launch`` and every ``synchronize`` call), reported as a
``CudaWarning`` at exit when never retrieved. ``Graph.add_host`` (``_graph.pyx``) makes
the nodes.
"""
__all__ = ["check_host_errors"]
cimport cython
from cpython.ref cimport PyObject

import warnings

from barecuda._errors cimport bc_state_t
from barecuda._loader cimport runtime_state
from barecuda._errors import CudaWarning

cdef bc_state_t *ST = runtime_state()

cdef list _host_errors = []
cdef Py_ssize_t _n_host_errors_dropped = 0


@cython.final
cdef class _HostCall:
    """One host node's callable; the C trampoline's userData (kept alive by its Graph)."""

    def __repr__(self):
        return f"<host node {self.where}>"


cdef void _run_host(PyObject *user) noexcept:
    global _n_host_errors_dropped
    cdef _HostCall c = <_HostCall><object>user
    try:
        c.fn()
    except BaseException as e:
        # Stored, not raised: the driver's thread has nowhere to raise to.
        try:
            e.add_note(f"raised by the host-node callable {c.fn!r} ({c.where})")
        except AttributeError:       # Python < 3.11: no add_note; PEP 678's attribute itself
            try:
                e.__notes__ = [*getattr(e, "__notes__", ()),
                               f"raised by the host-node callable {c.fn!r} ({c.where})"]
            except Exception:
                pass
        except Exception:
            pass
        # The store and its count are one step for check_host_errors on another thread
        # (free-threaded build; a no-op with the GIL). ST.host_errors is the count that
        # synchronize() reads without importing this module.
        with cython.critical_section(_host_errors):
            if len(_host_errors) < 1000:
                _host_errors.append(e)
            else:
                _n_host_errors_dropped += 1
            ST.host_errors += 1


cdef void host_trampoline(void *user) noexcept nogil:
    # Never touch an interpreter that is going away.
    if ST.finalizing or ST.forked:
        return
    with gil:
        _run_host(<PyObject *>user)


def check_host_errors():
    """Raise the first stored exception of a host-node callable, if any (and forget it;
    later ones are raised by later calls). Called by ``GraphExec.launch`` and by the
    ``synchronize`` of graph executables, streams, events and devices; call it yourself
    after waiting by other means (``Stream.synchronize_blocking``, a peer library)."""
    global _n_host_errors_dropped
    with cython.critical_section(_host_errors):
        if ST.host_errors == 0:
            return
        if not _host_errors:
            n = _n_host_errors_dropped
            ST.host_errors = 0
            _n_host_errors_dropped = 0
            raise RuntimeError(f"{n} more host-node callables raised (their exceptions were not kept: over 1000 stored)")
        e = _host_errors.pop(0)
        ST.host_errors -= 1
        raise e


def _warn_unraised_at_exit():
    if _host_errors:
        warnings.warn(f"{len(_host_errors)} exception(s) raised by CUDA graph host nodes were never "
                      f"retrieved; the first: {_host_errors[0]!r}", CudaWarning)


import atexit
atexit.register(_warn_unraised_at_exit)

