"""The op fast path (kernels/_opcall.pyx): a repeated call signature skips the Python
checks and launches what the checks launched the first time.

On the driver double (kernels from a PTX-only prebuilt folder made with real NVRTC):
every op's hit launches exactly what its Python path launches (entry, grid, block,
parameter bytes), with this call's arrays; memo hits and misses are counted; what the
checks read is in the key (closed buffers, dtype, shape, alignment, aliasing, device
tensors read through DLPack's C exchange API); a kernel the registry let go drops its
record; a property test compares the fast and the slow path's outcome (launch or
exception) over random pairs of calls. The GPU checks: test_args_opcall_gpu.py.
"""
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import barecuda as bc
import barecuda.kernels as K
from barecuda import _nvrtc
from barecuda.kernels import _opcall as O
from barecuda.kernels import _prebuild as PB
from barecuda.kernels import _registry as R

SOURCES = ("norms.cu", "softmax.cu", "rope.cu", "elementwise.cu", "sampling.cu")


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory):
    if not _nvrtc.nvrtc_available():
        pytest.skip("NVRTC not installed")
    out = str(tmp_path_factory.mktemp("prebuilt_opcall"))
    PB.build(out, archs=(), ptx=True, specs=[t for t in R.table() if t[0] in SOURCES], progress=False, jobs=2)
    return out


@pytest.fixture
def dbl(fake, prebuilt, tmp_path, monkeypatch):
    monkeypatch.setenv("BARECUDA_CACHE_DIR", str(tmp_path / "cache"))
    R._reset(prebuilt)
    O.clear()
    yield fake
    O.clear()
    R._reset(os.path.join(os.path.dirname(R.__file__), "prebuilt"))


@pytest.fixture(params=[True, False], ids=["direct", "via_launch"])
def direct(request):
    """Hits issue their own launch record, or go through Kernel.launch (both must agree)."""
    O.set_direct(request.param)
    yield request.param
    O.set_direct(True)


def _bufs(res):
    return [r for r in (res if isinstance(res, tuple) else (res,)) if isinstance(r, bc.DeviceBuffer)]


def launched(fake, res, n0):
    """The launch made since count n0 as comparable data: the result's new buffers'
    addresses in the parameters are replaced by their place in the result."""
    if fake.launch_count() == n0:
        return None
    L = fake.last_launch()
    params = L.params
    for i, b in enumerate(_bufs(res)):
        params = params.replace(b.ptr.to_bytes(8, "little"), b"<out%d>" % i)
    return L.name, L.grid, L.block, L.shared, L.stream, params


def outcome(fake, fn):
    """(launch data, result shape) of fn(), or (exception type, message)."""
    n0 = fake.launch_count()
    try:
        res = fn()
    except (TypeError, ValueError) as e:
        return type(e).__name__, str(e), fake.launch_count() - n0
    return launched(fake, res, n0), [(tuple(b.shape), str(b.dtype)) for b in _bufs(res)]


def e(shape, dtype="float16"):
    return bc.empty(shape, dtype)


# Each case: (op, a function making fresh arguments -> (args, kwargs))
CASES = {
    "rmsnorm_out": (K.rmsnorm, lambda: ((e((5, 256)), e(256)), {"out": e((5, 256))})),
    "rmsnorm_new": (K.rmsnorm, lambda: ((e((3, 1001), "float32"), e(1001, "float32")), {})),
    "rmsnorm_res": (K.rmsnorm, lambda: (lambda r: ((e((4, 512)), e(512)),
                                                   {"residual": r, "residual_out": r, "out": e((4, 512))}))(e((4, 512)))),
    "layernorm_res_new": (K.layernorm, lambda: ((e((4, 512), "bfloat16"), e(512, "bfloat16"), e(512, "bfloat16")),
                                                {"residual": e((4, 512), "bfloat16"), "eps": 1e-3})),
    "softmax_causal": (K.softmax, lambda: ((e((2, 3, 7, 9)),), {"scale": 0.5, "causal": True})),
    "rope_qk_dev_pos": (K.rope, lambda: ((e((4, 32, 128), "bfloat16"), e((4, 8, 128), "bfloat16")),
                                         {"pos": bc.zeros(1, "int32"), "layout": "llama"})),
    "rope_inplace": (K.rope, lambda: (lambda q: ((q,), {"out": q, "pos": 7}))(e((2, 4, 64), "float32"))),
    "silu_mul_split": (K.silu_mul, lambda: ((e((3, 2000)),), {})),
    "add_inplace": (K.add, lambda: (lambda a: ((a, e((7, 33), "float32")), {"out": a}))(e((7, 33), "float32"))),
    "gelu_tanh": (K.gelu, lambda: ((e((8, 64), "bfloat16"),), {"approximate": "tanh"})),
    "embedding": (K.embedding, lambda: ((e((100, 4096), "bfloat16"), bc.zeros((2, 3), "int32")), {})),
    "argmax": (K.argmax, lambda: ((e((2, 1000), "float32"),), {})),
    "sample": (K.sample, lambda: ((e((2, 1000), "float32"),),
                                  {"temperature": 0.8, "top_k": 40, "seed": 3, "offset": bc.zeros(1, "int32")})),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hit_launches_what_the_python_path_launches(dbl, direct, case):
    fn, make = CASES[case]
    args, kw = make()
    h0, m0, r0 = O.stats()
    first = outcome(dbl, lambda: fn(*args, **kw))              # miss: the checks, recorded
    again = outcome(dbl, lambda: fn(*args, **kw))              # hit: same objects
    assert O.stats() == (h0 + 1, m0 + 1, r0 + 1)
    assert first[0] is not None and again == first
    args2, kw2 = make()                                        # fresh arrays, same signature
    hit = outcome(dbl, lambda: fn(*args2, **kw2))
    assert O.stats()[0] == h0 + 2
    fn.clear()
    slow = outcome(dbl, lambda: fn(*args2, **kw2))             # the Python path on those arrays
    assert O.stats()[1] == m0 + 2
    assert hit == slow


def test_ops_are_named_functions_to_python():
    import copy
    import inspect
    import pickle
    assert pickle.loads(pickle.dumps(K.rmsnorm)) is K.rmsnorm and copy.deepcopy(K.silu_mul) is K.silu_mul
    assert str(inspect.signature(K.softmax)) == "(x, *, scale=1.0, causal=False, offset=None, out=None, stream=None)"
    assert K.rmsnorm.__doc__.startswith("RMS normalisation") and K.rmsnorm.__name__ == "rmsnorm"
    assert callable(K.rmsnorm.plan) and repr(K.add) == "<op add>"


def test_results_are_the_callers_arrays_or_new_ones(dbl):
    x, w, y, r = e((4, 256)), e(256), e((4, 256)), e((4, 256))
    for _ in range(2):
        assert K.rmsnorm(x, w, out=y) is y
        y2, h = K.rmsnorm(x, w, residual=r, residual_out=r, out=y)
        assert y2 is y and h is r
        assert K.rmsnorm(x, out=x) is x
    a, b = K.rmsnorm(x, w), K.rmsnorm(x, w)                    # out=None: a new array each call
    assert a is not b and a.ptr != b.ptr and a.shape == (4, 256) and str(a.dtype) == "float16"
    assert dbl.last_launch().params[:8] == b.ptr.to_bytes(8, "little")


def test_closed_buffer_after_a_hit_raises_as_before(dbl):
    x, w, y = e((4, 64)), e(64), e((4, 64))
    K.rmsnorm(x, w, out=y)
    K.rmsnorm(x, w, out=y)
    n0 = dbl.launch_count()
    w.close()
    with pytest.raises(ValueError, match="weight: the buffer is closed"):
        K.rmsnorm(x, w, out=y)
    y.close()
    with pytest.raises(ValueError, match="out: the buffer is closed"):
        K.rmsnorm(x, out=y)
    assert dbl.launch_count() == n0


def test_changed_argument_after_a_hit_takes_the_checks(dbl):
    x, w, y = e((4, 64)), e(64), e((4, 64))
    K.rmsnorm(x, w, out=y)
    K.rmsnorm(x, w, out=y)
    n0 = dbl.launch_count()
    with pytest.raises(TypeError, match="weight: dtype"):
        K.rmsnorm(x, e(64, "float32"), out=y)
    with pytest.raises(ValueError, match="out: shape"):
        K.rmsnorm(x, w, out=e((4, 65)))
    with pytest.raises(TypeError, match="out: dtype"):
        K.rmsnorm(x, w, out=e((4, 64), "float32"))
    with pytest.raises(TypeError, match="eps"):
        K.rmsnorm(x, w, eps="a", out=y)
    with pytest.raises(TypeError, match="address"):
        K.rmsnorm(x.ptr, w, out=y)
    with pytest.raises(TypeError):
        K.rmsnorm(x, w, out=y, bogus=1)
    with pytest.raises(TypeError):
        K.rmsnorm(x, w, 1e-6, 4)
    assert dbl.launch_count() == n0


def test_read_only_output_after_a_hit_is_refused(dbl):
    x, w, y = e((4, 64)), e(64), e((4, 64))
    K.rmsnorm(x, w, out=y)
    K.rmsnorm(x, w, out=y)
    ro = bc.as_device_buffer({"shape": (4, 64), "typestr": "<f2", "data": (y.ptr, True), "version": 3})
    n0 = dbl.launch_count()
    with pytest.raises(ValueError, match="out: read-only"):
        K.rmsnorm(x, w, out=ro)
    assert dbl.launch_count() == n0


def test_closed_stream_after_a_hit_raises_as_before(dbl, direct):
    x, w, y = e((4, 64)), e(64), e((4, 64))
    s = bc.Stream()
    K.rmsnorm(x, w, out=y, stream=s)
    K.rmsnorm(x, w, out=y, stream=s)
    s.close()
    n0 = dbl.launch_count()
    with pytest.raises(ValueError, match="closed") as hit:
        K.rmsnorm(x, w, out=y, stream=s)
    K.rmsnorm.clear()
    with pytest.raises(ValueError, match="closed") as slow:
        K.rmsnorm(x, w, out=y, stream=s)
    assert str(hit.value) == str(slow.value) and dbl.launch_count() == n0


def test_alignment_is_in_the_key(dbl):
    x, w = e((4, 64)), e(64)
    K.rmsnorm(x, w)
    K.rmsnorm(x, w)
    assert dbl.last_launch().name == "rmsnorm_f16_v1"
    big = e(4 * 64 + 8)
    off = big[1:1 + 4 * 64].view(shape=(4, 64))                # 2 bytes off 16: the scalar path
    K.rmsnorm(off, w)
    assert dbl.last_launch().name == "rmsnorm_f16_s8"
    on = big[8:8 + 4 * 64].view(shape=(4, 64))                 # 16 bytes on: the vector path again
    K.rmsnorm(on, w)
    assert dbl.last_launch().name == "rmsnorm_f16_v1"


def test_aliasing_is_in_the_key(dbl):
    x, w, y = e((4, 64)), e(64), e((4, 64))
    r = e((4, 64))
    for kw in ({"out": y}, {"out": x}, {"out": y}, {"residual": r, "residual_out": r},
               {"residual": r, "residual_out": x}, {"residual": r}, {"residual": r, "residual_out": r}):
        fast = outcome(dbl, lambda: K.rmsnorm(x, w, **kw))
        K.rmsnorm.clear()
        assert outcome(dbl, lambda: K.rmsnorm(x, w, **kw)) == fast, kw


def test_strided_rows_are_in_the_key(dbl):
    base = e((8, 64))
    K.softmax(base, out=base)
    K.softmax(base, out=base)
    rows = bc.as_device_buffer({"shape": (4, 64), "typestr": "<f2", "data": (base.ptr, False), "version": 3,
                                "strides": (256, 2)})       # every other row: row stride 128 elements
    fast = outcome(dbl, lambda: K.softmax(rows, out=rows))
    K.softmax.clear()
    assert outcome(dbl, lambda: K.softmax(rows, out=rows)) == fast
    assert fast[0][0] == "softmax_f16_v1"


def test_hits_under_capture_are_recorded_by_the_graph(dbl, direct):
    s = bc.Stream()
    x, w, y = e((4, 512), "bfloat16"), e(512, "bfloat16"), e((4, 512), "bfloat16")
    K.rmsnorm(x, w, out=y, stream=s)                          # recorded outside the capture
    K.silu_mul(x, stream=s)
    h0 = O.stats()[0]
    with s.capture() as g:
        K.rmsnorm(x, w, out=y, stream=s)                      # hits: Kernel.launch records them
        K.silu_mul(x, stream=s)
    assert O.stats()[0] == h0 + 2
    assert [n.kernel.name for n in g.kernel_nodes()] == ["rmsnorm_bf16_v1", "ew_silu_mul_bf16_vec"]
    exe = g.instantiate()
    del x, w, y
    exe.launch(s)                                             # the graph held the buffers
    s.synchronize()


def test_registry_reset_drops_the_record(dbl, prebuilt):
    x, w, y = e((4, 64)), e(64), e((4, 64))
    K.rmsnorm(x, w, out=y)
    assert K.rmsnorm.memo_size == 1
    R._reset(prebuilt)                                         # the registry lets its kernels go
    h0, m0, _ = O.stats()
    K.rmsnorm(x, w, out=y)
    assert O.stats()[:2] == (h0, m0 + 1)
    assert dbl.last_launch().name == "rmsnorm_f16_v1"


def test_registry_reset_drops_records_whose_kernels_are_still_alive(dbl, prebuilt):
    # compute-sanitizer keeps frames (and so the old kernels) alive: the reset itself must
    # drop the records, or a hit launches a kernel the registry no longer gives out
    x, w, y = e((4, 64)), e(64), e((4, 64))
    K.rmsnorm(x, w, out=y)
    held = list(R._kernels.values())                           # the old registry's kernels live on
    assert held
    R._reset(prebuilt)
    h0, m0, _ = O.stats()
    K.rmsnorm(x, w, out=y)
    assert O.stats()[:2] == (h0, m0 + 1)                       # a miss: the registry was asked again
    assert R.origin("norms.cu", ()) is not None
    del held


def test_unkeyable_arguments_take_the_python_path(dbl):
    q = e((2, 4, 64), "float32")
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    h0, m0, r0 = O.stats()
    for _ in range(3):
        K.rope(q, out=q, scaling=scaling)
    assert O.stats() == (h0, m0 + 3, r0)
    K.rope(q, out=q, pos=3)
    K.rope(q, out=q, pos=4)                                   # another value: another record
    K.rope(q, out=q, pos=3)
    assert O.stats()[0] == h0 + 1 and K.rope.memo_size == 2


def test_tensor_class_read_in_c(dbl, direct):
    """A tensor class with DLPack's C exchange API: keyed from its DLTensor, the caller's
    object returned, the launch bytes those of the Python path, and on a hit the library's
    current stream ordered before ours once per launch (none when it is ours)."""
    from _helpers import exchange_api_class
    s, producer = bc.Stream(), bc.Stream()
    counts = {"dltensor": 0, "stream": 0}
    current = [producer.handle_int]
    Base = exchange_api_class(current, counts)

    class T(Base):
        """A device float32 array of 16 elements that DLPack's C exchange API reads
        (the helper's DLTensor) and __cuda_array_interface__ describes alike."""
        __dlpack_c_exchange_api__ = Base.__dlpack_c_exchange_api__

        @property
        def __cuda_array_interface__(self):
            return {"shape": (16,), "typestr": "<f4", "data": (self.ptr, False), "version": 3, "strides": None}

    def waits():
        return dbl.calls("cuStreamWaitEvent")

    bx, by, bw = (bc.empty(32, "float32") for _ in range(3))
    x, y, w = (T(b.ptr, 0) for b in (bx, by, bw))
    slow = outcome(dbl, lambda: K.rmsnorm(x, w, out=y, stream=s))
    assert K.rmsnorm(x, w, out=y, stream=s) is y               # a hit: the caller's own object back
    assert K.rmsnorm.memo_size == 1
    c0, w0, h0 = counts["dltensor"], waits(), O.stats()[0]
    fast = outcome(dbl, lambda: K.rmsnorm(x, w, out=y, stream=s))
    assert fast == slow and O.stats()[0] == h0 + 1
    assert counts["dltensor"] > c0 and waits() == w0 + 1      # ordered after the producer, once
    current[0] = s.handle_int                                 # the library's current stream is ours
    w0 = waits()
    assert outcome(dbl, lambda: K.rmsnorm(x, w, out=y, stream=s)) == slow and waits() == w0
    x2 = T(bx.ptr + 4, 0)                                      # another alignment class: the checks again
    h = O.stats()[0]
    K.rmsnorm(x2, w, out=y, stream=s)
    assert O.stats()[0] == h



def test_tensor_hit_reads_each_tensor_once_and_the_stream_rule_once(dbl):
    """A direct hit reads each tensor through the exchange API once for the key, plus once
    for the launch's first tensor of a class (tensor_pointer: the stream rule); later
    tensors of that class and device take the address the key read. Tensors of another
    class go through tensor_pointer again (the stream ordered again, as the launch packer
    does): the launch bytes and the waits are the Python path's. The direct issue runs only
    with the GIL switch off; with it on (always on a free-threaded interpreter) hits go
    through Kernel.launch, which reads every tensor again, and these counts do not apply."""
    if bc.launch_releases_gil():
        pytest.skip("launches release the GIL (free-threaded build): hits are issued through Kernel.launch, "
                    "not the direct path whose reads this test counts")
    from _helpers import exchange_api_class
    s, producer = bc.Stream(), bc.Stream()
    counts = {"dltensor": 0, "stream": 0}
    other = {"dltensor": 0, "stream": 0}

    def tensor_class(counts):
        Base = exchange_api_class([producer.handle_int], counts)

        class T(Base):
            __dlpack_c_exchange_api__ = Base.__dlpack_c_exchange_api__

            @property
            def __cuda_array_interface__(self):
                return {"shape": (16,), "typestr": "<f4", "data": (self.ptr, False), "version": 3, "strides": None}
        return T
    T, U = tensor_class(counts), tensor_class(other)

    def waits():
        return dbl.calls("cuStreamWaitEvent")

    bx, by, bw = (bc.empty(32, "float32") for _ in range(3))
    x, y, w = (T(b.ptr, 0) for b in (bx, by, bw))
    slow = outcome(dbl, lambda: K.rmsnorm(x, w, out=y, stream=s))     # recorded
    c0, w0, h0 = counts["dltensor"], waits(), O.stats()[0]
    assert outcome(dbl, lambda: K.rmsnorm(x, w, out=y, stream=s)) == slow and O.stats()[0] == h0 + 1
    assert counts["dltensor"] == c0 + 3 + 1 and waits() == w0 + 1
    wu = U(bw.ptr, 0)                                          # the weight of another class
    K.rmsnorm(x, wu, out=y, stream=s)
    c0, o0, w0, h0 = counts["dltensor"], other["dltensor"], waits(), O.stats()[0]
    fast = outcome(dbl, lambda: K.rmsnorm(x, wu, out=y, stream=s))
    assert O.stats()[0] == h0 + 1
    # y (parameter 0), x, then w: T's y and x once each for the key + y for the stream rule;
    # U's w once for the key and once in tensor_pointer; each class's stream ordered once
    assert counts["dltensor"] == c0 + 3 and other["dltensor"] == o0 + 2 and waits() == w0 + 2
    K.rmsnorm.clear()
    assert outcome(dbl, lambda: K.rmsnorm(x, wu, out=y, stream=s)) == fast



def test_new_output_on_a_hit_is_the_buffer_empty_makes(dbl, direct):
    """out=None: a hit's new output is what the Python path's bc.empty makes (shape, dtype,
    item size, bytes, device, the stream it is ordered on), a new buffer each call."""
    s = bc.Stream()
    for dt in ("float32", "float16", "bfloat16"):
        x, w = e((3, 1001), dt), e(1001, dt)
        K.rmsnorm.clear()
        ref = K.rmsnorm(x, w, stream=s)                       # the Python path
        outs = [K.rmsnorm(x, w, stream=s) for _ in range(2)] + [K.rmsnorm(x, w)]
        for i, b in enumerate(outs):
            assert type(b) is bc.DeviceBuffer and b is not ref and b.ptr not in (ref.ptr, x.ptr)
            assert (b.shape, b.dtype, b.itemsize, b.nbytes, b.device) == \
                (ref.shape, ref.dtype, ref.itemsize, ref.nbytes, ref.device)
            assert b.stream is (s if i < 2 else None)
        assert outs[0].ptr != outs[1].ptr
        assert str(outs[0].dtype) == dt

def test_misses_in_a_row_thin_out_recording_until_clear(dbl):
    """After 32 misses in a row an op records only every 32nd miss (a call site whose
    signature changes every call makes no record churn); Op.clear() starts the count again."""
    w = bc.zeros(64, "float32")
    for i in range(40):
        K.rmsnorm(bc.zeros((1 + i, 64), "float32"), w)
    x = bc.zeros((100, 64), "float32")
    h0, m0, _ = O.stats()
    K.rmsnorm(x, w)
    K.rmsnorm(x, w)
    assert O.stats()[:2] == (h0, m0 + 2)
    K.rmsnorm.clear()
    K.rmsnorm(x, w)
    K.rmsnorm(x, w)
    assert O.stats()[:2] == (h0 + 1, m0 + 3)


def test_keyword_binding_is_reused_exactly(dbl):
    """A call with the keyword names (the same tuple: one call site's constant) and
    positional count of the last bound call reuses its binding; the same names with
    another positional count bind again, so a parameter given twice still raises."""
    x, w, y, y2 = e((4, 256)), e(256), e((4, 256)), e((4, 256))
    ref = outcome(dbl, lambda: K.rmsnorm(x, weight=w, out=y))
    for _ in range(2):
        h = O.stats()[0]
        assert outcome(dbl, lambda: K.rmsnorm(x, weight=w, out=y)) == ref and O.stats()[0] == h + 1
        with pytest.raises(TypeError, match="weight"):
            K.rmsnorm(x, w, weight=w, out=y)                   # same names, one more positional
        with pytest.raises(TypeError):
            K.rmsnorm(weight=w, out=y)                         # x missing
    assert outcome(dbl, lambda: K.rmsnorm(x, out=y, weight=w)) == ref      # another order: the same launch
    fast = outcome(dbl, lambda: K.rmsnorm(x, w, eps=1e-3, out=y2))     # other names: bound again
    K.rmsnorm.clear()
    assert outcome(dbl, lambda: K.rmsnorm(x, w, eps=1e-3, out=y2)) == fast != ref
    assert outcome(dbl, lambda: K.rmsnorm(x, weight=w, out=y)) == ref


def test_last_record_checked_first_misses_exactly(dbl, direct):
    """Alternating signatures: each call is checked against the last record first, then
    the others; every launch is the Python path's."""
    a = (e((4, 256)), e(256), e((4, 256)))
    b = (e((3, 512)), e(512), e((3, 512)))
    c = (e((4, 256), "float32"), e(256, "float32"), e((4, 256), "float32"))
    refs = {}
    for name, (x, w, y) in (("a", a), ("b", b), ("c", c)):
        K.rmsnorm.clear()
        refs[name] = outcome(dbl, lambda: K.rmsnorm(x, w, out=y))
    K.rmsnorm.clear()
    for name in "abcabccba":
        x, w, y = {"a": a, "b": b, "c": c}[name]
        assert outcome(dbl, lambda: K.rmsnorm(x, w, out=y)) == refs[name]
    assert K.rmsnorm.memo_size == 3


# ------------------------------------------------------------------ matvec, dequantize, matmul, attention
from barecuda.kernels import _attention as KA  # noqa: E402
from barecuda.kernels import _dequant as KD  # noqa: E402
from barecuda.kernels import _matmul as KMM  # noqa: E402
from barecuda.kernels import _matvec as KM  # noqa: E402


@pytest.fixture
def dblk(dbl, monkeypatch):
    """dbl, with matvec/dequant/gemm/attention kernels from PTX the double accepts (their
    sources are not in the prebuilt folder), each kernel kept for the test as the registry
    would (a record holds its kernel weakly)."""
    from _quant_helpers import lowered_ptx_get
    real, held = R.get, {}

    def get(source, name, defines=(), device=None):
        if source in SOURCES:
            return real(source, name, defines, device)
        key = (source, name, defines)
        if key not in held:
            held[key] = lowered_ptx_get(source, name, defines, device)
        return held[key]
    monkeypatch.setattr(R, "get", get)
    return dbl


def qw(n, k, fmt="q4_k"):
    _, _, qk, nb = KD.format_info(fmt)
    return KD.QuantWeight(bc.zeros(n * k // qk * nb, "uint8"), fmt, (n, k))


def _ws(n_heads, n_kv, d, splits):
    return bc.zeros(KA.decode_workspace_size(n_heads, n_kv, d, splits), "uint8")


BIG_CASES = {
    "matvec_f16_out": (KM.matvec, lambda: ((e((64, 256)), e(256)), {"out": e(64)})),
    "matvec_bf16_batch_res": (KM.matvec, lambda: ((e((40, 512), "bfloat16"), e((3, 512), "bfloat16")),
                                                  {"residual": e((3, 40), "bfloat16")})),
    "matvec_q4k_f16": (KM.matvec, lambda: ((qw(64, 256), e(256)), {})),
    "matvec_q4k_f32_res_inplace": (KM.matvec, lambda: (lambda r: ((qw(32, 512), e(512, "float32")),
                                                                  {"residual": r, "out": r}))(e(32, "float32"))),
    "matvec_q8_0_batch": (KM.matvec, lambda: ((qw(48, 64, "q8_0"), e((4, 64))), {"out": e((4, 48))})),
    "matvec_silu_mul_f16": (KM.matvec_silu_mul, lambda: ((e((64, 256)), e((64, 256)), e(256)), {})),
    "matvec_silu_mul_q4k": (KM.matvec_silu_mul, lambda: ((qw(64, 256), qw(64, 256), e((2, 256))), {})),
    "dequantize_qw": (KD.dequantize, lambda: ((qw(16, 512),), {})),
    "dequantize_bytes_out": (KD.dequantize, lambda: ((bc.zeros(8 * 64 // 32 * 34, "uint8"), "q8_0", (8, 64)),
                                                     {"dtype": "float32", "out": e((8, 64), "float32")})),
    "matmul_tc": (KMM.matmul, lambda: ((e((64, 64)), e((64, 128))), {"backend": "builtin"})),
    "matmul_tc_batched_tb": (KMM.matmul, lambda: ((e((2, 64, 32), "bfloat16"), e((48, 32), "bfloat16")),
                                                  {"trans_b": True, "backend": "builtin"})),
    "matmul_simt_beta": (KMM.matmul, lambda: ((e((33, 17), "float32"), e((17, 9), "float32")),
                                              {"out": e((33, 9), "float32"), "alpha": 2.0, "beta": 0.5,
                                               "backend": "builtin"})),
    "matmul_auto_small": (KMM.matmul, lambda: ((e((16, 32)), e((32, 24))), {})),
    "attn_decode_one_split": (KA.attention_decode, lambda: ((e((8, 64)), e((64, 2, 64)), e((64, 2, 64)),
                                                             bc.zeros(1, "int32")), {"n_splits": 1})),
    "attn_decode_workspace": (KA.attention_decode, lambda: ((e((8, 64)), e((512, 2, 64)), e((512, 2, 64)),
                                                             bc.zeros(1, "int32")),
                                                            {"n_splits": 4, "workspace": _ws(8, 2, 64, 4),
                                                             "out": e((8, 64)), "len_offset": 1})),
    "attn_decode_f32": (KA.attention_decode, lambda: ((e((4, 64), "float32"), e((32, 4, 64), "float32"),
                                                       e((32, 4, 64), "float32"), bc.zeros(1, "int32")), {})),
    "attn_prefill_causal": (KA.attention_prefill, lambda: ((e((40, 4, 64)), e((40, 2, 64)), e((40, 2, 64))), {})),
    "kv_append": (KA.kv_append, lambda: ((e((2, 64)), e((2, 64)), e((16, 2, 64)), e((16, 2, 64)),
                                          bc.zeros(1, "int32")), {"pos_offset": 1})),
}


@pytest.mark.parametrize("case", sorted(BIG_CASES))
def test_hit_launches_what_the_python_path_launches_big_ops(dblk, direct, case):
    """matvec (dense and QuantWeight), matvec_silu_mul, dequantize, matmul (builtin),
    attention decode/prefill and kv_append: a repeated signature is one recorded launch,
    the same launch the checks make (fresh arrays: this call's addresses)."""
    fn, make = BIG_CASES[case]
    args, kw = make()
    h0, m0, r0 = O.stats()
    first = outcome(dblk, lambda: fn(*args, **kw))
    again = outcome(dblk, lambda: fn(*args, **kw))
    assert O.stats() == (h0 + 1, m0 + 1, r0 + 1)
    assert first[0] is not None and again == first
    args2, kw2 = make()
    hit = outcome(dblk, lambda: fn(*args2, **kw2))
    assert O.stats()[0] == h0 + 2
    fn.clear()
    slow = outcome(dblk, lambda: fn(*args2, **kw2))
    assert O.stats()[1] == m0 + 2
    assert hit == slow


def test_quant_weight_is_keyed_by_format_shape_and_buffer(dblk, direct):
    x = e(256)
    KM.matvec(qw(64, 256), x)
    h0, m0, _ = O.stats()
    fast = outcome(dblk, lambda: KM.matvec(qw(64, 256), x))            # another weight, same signature: a hit
    assert O.stats()[:2] == (h0 + 1, m0)
    for other in (qw(64, 256, "q8_0"), qw(32, 256), qw(64, 512)):      # format or shape: the checks again
        o = outcome(dblk, lambda: KM.matvec(other, x))
        KM.matvec.clear()
        assert outcome(dblk, lambda: KM.matvec(other, x)) == o
    assert O.stats()[0] == h0 + 1
    KM.matvec.clear()
    assert outcome(dblk, lambda: KM.matvec(qw(64, 256), x)) == fast
    w = qw(64, 256)
    with pytest.raises(AttributeError, match="immutable"):
        w.format = "q8_0"
    with pytest.raises(AttributeError, match="immutable"):
        w.shape = (32, 512)
    import copy
    c = copy.copy(w)
    assert c is not w and (c.data, c.format, c.shape, c.ggml_type) == (w.data, w.format, w.shape, w.ggml_type)



def test_tuple_values_after_a_hit(dblk, direct):
    """A tuple argument (dequantize's shape) is keyed by value as a tuple of exact ints: an
    equal new tuple hits, one with a float or another value takes the checks (the last
    record's one-pass check takes only the recorded tuple object itself)."""
    raw, o = bc.zeros(64 * 144, "uint8"), e((64, 256))
    KD.dequantize(raw, "q4_k", (64, 256), out=o)
    h0 = O.stats()[0]
    fast = outcome(dblk, lambda: KD.dequantize(raw, "q4_k", tuple([64, 256]), out=o))
    assert O.stats()[0] == h0 + 1
    for shape in ((64.0, 256), (32, 512), (64, 256, 1)):
        h = O.stats()[0]
        got = outcome(dblk, lambda: KD.dequantize(raw, "q4_k", shape, out=o))
        assert O.stats()[0] == h
        KD.dequantize.clear()
        assert outcome(dblk, lambda: KD.dequantize(raw, "q4_k", shape, out=o)) == got
        KD.dequantize(raw, "q4_k", (64, 256), out=o)
    KD.dequantize.clear()
    assert outcome(dblk, lambda: KD.dequantize(raw, "q4_k", (64, 256), out=o)) == fast

def test_quant_weight_closed_data_takes_the_python_path(dblk):
    w, x = qw(64, 256), e(256)
    KM.matvec(w, x)
    KM.matvec(w, x)
    w.data.close()
    h0 = O.stats()[0]
    hit = outcome(dblk, lambda: KM.matvec(w, x))
    KM.matvec.clear()
    assert outcome(dblk, lambda: KM.matvec(w, x)) == hit and O.stats()[0] == h0
    assert hit[0] == "ValueError" and hit[2] == 0


def test_quant_weight_aliasing_is_in_the_key(dblk, direct):
    """gate is up (one QuantWeight twice) and gate, up distinct: separate records, each the
    launch its own checks make."""
    w, u, x = qw(64, 256), qw(64, 256), e(256)
    for g, uu in ((w, w), (w, u), (w, w), (u, w)):
        fast = outcome(dblk, lambda: KM.matvec_silu_mul(g, uu, x))
        KM.matvec_silu_mul.clear()
        assert outcome(dblk, lambda: KM.matvec_silu_mul(g, uu, x)) == fast


def test_decode_without_workspace_is_not_recorded(dblk):
    """n_splits > 1 and no workspace=: the checks zero a new workspace each call (not one
    launch), so that call is never recorded; it still launches as before."""
    q, k, v, ln = e((8, 64)), e((512, 2, 64)), e((512, 2, 64)), bc.zeros(1, "int32")
    KA.attention_decode.clear()
    h0, m0, r0 = O.stats()
    outs = [outcome(dblk, lambda: KA.attention_decode(q, k, v, ln, n_splits=4)) for _ in range(3)]
    assert O.stats() == (h0, m0 + 3, r0) and KA.attention_decode.memo_size == 0
    assert outs[0][0][0] == "attn_decode_f16" and all(o[0][:4] == outs[0][0][:4] for o in outs)


def test_setting_a_family_module_value_forgets_the_records(dblk, monkeypatch):
    """Tuning values are module attributes the checks read at call time (tests and benches
    set them): setting one forgets every op's records, so the next call takes the checks."""
    monkeypatch.setattr(KMM, "WG", 0)       # the mma.sync kernel, whose BK is set below (the double is a 9.0)
    a, b = e((64, 64)), e((64, 128))
    KMM.matmul(a, b, backend="builtin")
    KMM.matmul(a, b, backend="builtin")
    KM.matvec(qw(64, 256), e(256))
    assert KMM.matmul.memo_size == 1 and KM.matvec.memo_size == 1
    assert dblk.last_launch().name == "matvec_f16_tcd"
    monkeypatch.setattr(KMM, "BK", 32)
    assert KMM.matmul.memo_size == 0 and KM.matvec.memo_size == 0
    h0, m0, _ = O.stats()
    KMM.matmul(a, b, backend="builtin")
    assert O.stats()[:2] == (h0, m0 + 1) and dblk.last_launch().shared == KMM.tc_smem(0, 0)
    KMM.matmul(a, b, backend="builtin")
    assert O.stats()[0] == h0 + 1
    monkeypatch.setattr(KM, "TCD", False)
    KM.matvec(qw(64, 256), e(256))
    assert dblk.last_launch().name != "matvec_f16_tcd"


def test_matmul_checks_after_a_hit_raise_as_before(dblk):
    a, b = e((64, 64)), e((64, 128))
    KMM.matmul(a, b, backend="builtin")
    KMM.matmul(a, b, backend="builtin")
    n0 = dblk.launch_count()
    with pytest.raises(ValueError, match="inner dimensions"):
        KMM.matmul(a, e((32, 128)), backend="builtin")
    with pytest.raises(ValueError, match="beta"):
        KMM.matmul(a, b, beta=1.0, backend="builtin")
    with pytest.raises(ValueError, match="backend"):
        KMM.matmul(a, b, backend="cuda")
    assert dblk.launch_count() == n0


# ------------------------------------------------------------------ property: fast == slow
_DT = ("float32", "float16")
_KEYS = ("dx", "dw", "rows", "cols", "off", "out", "res", "close", "eps")
_cfg = st.fixed_dictionaries({
    "dx": st.sampled_from(_DT), "dw": st.sampled_from(_DT + (None,)), "rows": st.integers(1, 3),
    "cols": st.sampled_from([8, 16, 24, 64]), "off": st.sampled_from([0, 2, 4, 16]),
    "out": st.sampled_from(["new", "y", "x", "bad_shape", "bad_dtype"]), "res": st.booleans(),
    "close": st.sampled_from([None, "x", "w", "y"]), "eps": st.sampled_from([1e-6, 1e-5, 1, "e"]),
})


def _make(cfg):
    dx, cols, rows = cfg["dx"], cfg["cols"], cfg["rows"]
    isz = 4 if dx == "float32" else 2
    big = bc.empty(rows * cols + 16, dx)
    x = big[cfg["off"] // isz:cfg["off"] // isz + rows * cols].view(shape=(rows, cols))
    bufs = {"x": x, "big": big}
    kw = {"eps": cfg["eps"]}
    if cfg["dw"]:
        bufs["w"] = kw["weight"] = bc.empty(cols, cfg["dw"])
    if cfg["res"]:
        kw["residual"] = kw["residual_out"] = bc.empty((rows, cols), dx)
    o = cfg["out"]
    if o == "y":
        bufs["y"] = kw["out"] = bc.empty((rows, cols), dx)
    elif o == "x":
        kw["out"] = x
    elif o == "bad_shape":
        kw["out"] = bc.empty((rows, cols + 1), dx)
    elif o == "bad_dtype":
        kw["out"] = bc.empty((rows, cols), "float32" if dx == "float16" else "float16")
    c = cfg["close"]
    if c in bufs:
        bufs[c].close()
    return (x,), kw, big


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=_cfg, other=_cfg, change=st.sets(st.sampled_from(sorted(_KEYS)), max_size=2))
def test_fast_and_python_paths_agree(dbl, direct, a, other, change):
    """b is a with up to two settings changed (none: the same signature, a hit)."""
    b = {k: other[k] if k in change else a[k] for k in a}
    K.rmsnorm.clear()
    args_a, kw_a, keep_a = _make(a)
    outcome(dbl, lambda: K.rmsnorm(*args_a, **kw_a))           # records a's signature (when valid)
    outcome(dbl, lambda: K.rmsnorm(*args_a, **kw_a))
    args_b, kw_b, keep_b = _make(b)
    fast = outcome(dbl, lambda: K.rmsnorm(*args_b, **kw_b))    # a hit when b's signature is a's
    K.rmsnorm.clear()
    slow = outcome(dbl, lambda: K.rmsnorm(*args_b, **kw_b))
    assert fast == slow
