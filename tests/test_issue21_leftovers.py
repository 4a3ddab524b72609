"""Issue 21, leftovers 9a and 9c.

- A ``.param .align`` that no layout can use (not a power of two, or larger than the
  parameter space) is a ValueError naming the kernel and the parameter, not a bare
  ``OverflowError`` about ``uint32_t`` from deep in the packer.
- A device-to-device copy whose source and destination overlap inside one allocation
  is refused with ValueError before any driver call (CUDA leaves its result undefined;
  docs/errors.md, "Overlapping copies").
"""
import pytest

import barecuda as bc
from fakecuda.ptx import HEADER


def _entry(align):
    return HEADER + f"""
.visible .entry k(
    .param .align {align} .b8 s[8]
)
{{
    ret;
}}
"""


@pytest.mark.parametrize("align", [4294967296, 1 << 40, 65536, 3, 0])
def test_param_align_too_large_message(fake, align):
    with pytest.raises(ValueError, match=r"k.*\.align.*power of two no larger than 32768") as ei:
        bc.Module.from_ptx(_entry(align)).get_kernel("k")
    assert not isinstance(ei.value, OverflowError)


def test_param_align_in_range_still_loads(fake):
    k = bc.Module.from_ptx(_entry(16)).get_kernel("k")
    assert k is not None


def test_user_signature_align_too_large_message(fake):
    from barecuda import _signature
    with pytest.raises(ValueError, match="power-of-two align"):
        _signature.signature_entries([("bytes", 8, 1 << 32)])


def test_overlapping_copy_refused(fake):
    b = bc.alloc(1024)
    b.memset(7)
    before = fake.calls("cuMemcpyDtoDAsync")
    for dst, src in ((b[0:512], b[256:768]), (b[256:768], b[0:512]), (b, b), (b[0:512], b.view()[100:612])):
        with pytest.raises(ValueError, match="overlapping copy"):
            dst.copy_from(src)
    with pytest.raises(ValueError, match="overlapping copy"):
        b[0:512].copy_to(b[1:513])
    assert fake.calls("cuMemcpyDtoDAsync") == before          # refused before the driver
    b[0:512].copy_from(b[512:1024])                             # adjacent, not overlapping: fine
    b.close()
