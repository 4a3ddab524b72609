"""Issue 21, defect 7: ``ipc.open_buffer`` trusts nothing in a handle.

A handle's offset and size are the sender's word: after ``cuIpcOpenMemHandle`` they are
checked against the mapped allocation (``cuMemGetAddressRange``); any error after the
open closes the mapping again, so the same allocation can still be opened in this
process; a handle whose exporter pid is not a positive int is refused before the
driver. On the driver double, which (one process) opens a process's own handles, the
handles are made to look foreign as in tests/test_ipc.py.
"""
import ctypes
import os
import pickle

import pytest

import barecuda as bc
from barecuda import ipc


def _foreign(h, pid=None):
    h2 = pickle.loads(pickle.dumps(h))
    h2.pid = os.getppid() if pid is None else pid
    return h2


def _ipc_live(fake):
    fn = fake.lib.fakecuda_ipc_live
    fn.restype = ctypes.c_int
    return fn()


def _reopens(fake, buf, h):
    """The allocation can be opened (and closed) again: no mapping was left behind."""
    v = ipc.open_buffer(h)
    assert v.ptr == buf.ptr + h.offset
    v.close()
    assert _ipc_live(fake) == 0


def test_ipc_open_rejects_offset_past_allocation(fake):
    buf = bc.ipc.IpcAllocator(0).alloc(1024)
    good = _foreign(ipc.export_buffer(buf))
    bad = _foreign(ipc.export_buffer(buf))
    bad.offset = 1 << 20                      # a view starting a MiB past the allocation
    with pytest.raises(bc.ipc.IpcError, match="malformed or forged"):
        ipc.open_buffer(bad)
    assert _ipc_live(fake) == 0
    _reopens(fake, buf, good)
    buf.close()


def test_ipc_open_rejects_size_past_allocation(fake):
    buf = bc.ipc.IpcAllocator(0).alloc(1024)
    good = _foreign(ipc.export_buffer(buf))
    bad = _foreign(ipc.export_buffer(buf))
    bad.offset, bad.nbytes, bad.shape = 512, 1 << 20, (1 << 20,)      # reaches past the end
    with pytest.raises(bc.ipc.IpcError, match="malformed or forged"):
        ipc.open_buffer(bad)
    assert _ipc_live(fake) == 0
    _reopens(fake, buf, good)
    buf.close()


@pytest.mark.parametrize("offset", [-1, -(1 << 40), 0.0, "0", None])
def test_ipc_open_rejects_offset_before_allocation(fake, offset):
    """A negative or non-int offset is refused before the driver is called (a view
    starting before the allocation, or a TypeError after the open that leaked it)."""
    buf = bc.ipc.IpcAllocator(0).alloc(1024)
    good = _foreign(ipc.export_buffer(buf))
    bad = _foreign(ipc.export_buffer(buf))
    bad.offset = offset
    n = fake.calls("cuIpcOpenMemHandle")
    with pytest.raises(ValueError, match="malformed MemHandle"):
        ipc.open_buffer(bad)
    assert fake.calls("cuIpcOpenMemHandle") == n
    _reopens(fake, buf, good)
    buf.close()


def test_ipc_open_closes_mapping_on_error(fake):
    """An error after cuIpcOpenMemHandle (here the bounds check's own driver call
    fails) closes the mapping: the allocation opens again afterwards."""
    buf = bc.ipc.IpcAllocator(0).alloc(1024)
    h = _foreign(ipc.export_buffer(buf))
    closes = fake.calls("cuIpcCloseMemHandle")
    fake.fail("cuMemGetAddressRange", 999)     # CUDA_ERROR_UNKNOWN
    with pytest.raises(bc.CudaError):
        ipc.open_buffer(h)
    assert fake.calls("cuIpcCloseMemHandle") == closes + 1
    assert _ipc_live(fake) == 0
    _reopens(fake, buf, h)
    buf.close()


def test_ipc_open_closes_mapping_on_bad_shape(fake):
    """A handle whose dtype/shape do not cover its bytes fails after the open (making
    the typed view): the mapping is closed at once, not left to the garbage collector."""
    buf = bc.ipc.IpcAllocator(0).alloc(1024)
    good = _foreign(ipc.export_buffer(buf))
    bad = _foreign(ipc.export_buffer(buf))
    bad.dtype, bad.shape = "float32", (7,)
    with pytest.raises(ValueError):
        ipc.open_buffer(bad)
    assert _ipc_live(fake) == 0
    _reopens(fake, buf, good)
    buf.close()


@pytest.mark.parametrize("pid", [0, -1, -os.getpid(), "123", 1.5], ids=["zero", "minus-one", "minus-own-pid", "str", "float"])
def test_ipc_rejects_nonpositive_pid(fake, pid):
    """os.kill(0 or -n, 0) succeeds (a process group), so pid <= 0 passed both the
    own-process and the exporter-alive checks; refused before any driver call."""
    buf = bc.ipc.IpcAllocator(0).alloc(1024)
    h = _foreign(ipc.export_buffer(buf), pid=pid)
    n = fake.calls("cuIpcOpenMemHandle")
    with pytest.raises(bc.ipc.IpcError, match="exporter pid"):
        ipc.open_buffer(h)
    assert fake.calls("cuIpcOpenMemHandle") == n
    assert _ipc_live(fake) == 0
    buf.close()


def test_ipc_event_rejects_nonpositive_pid(fake):
    ev = ipc.ipc_event(0)
    h = pickle.loads(pickle.dumps(ipc.export_event(ev)))
    h.pid = 0
    n = fake.calls("cuIpcOpenEventHandle")
    with pytest.raises(bc.ipc.IpcError, match="exporter pid"):
        ipc.open_event(h)
    assert fake.calls("cuIpcOpenEventHandle") == n
    ev.close()
