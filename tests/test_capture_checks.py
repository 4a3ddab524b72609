"""Issue 21, defect 8: a stream's capture is refused the two ways it could be broken.

``Stream.close()`` while a capture runs on that stream raises ``ValueError`` ("end the
capture first") and leaves both the stream and the capture usable; a second capture on
a stream that is already capturing raises ``ValueError`` before the driver is called
(the running capture goes on undisturbed).
"""
import pytest

import barecuda as bc


def test_close_during_capture_refused(fake):
    s = bc.Stream()
    b = bc.alloc(256, stream=s)
    with s.capture() as g:
        with pytest.raises(ValueError, match="end the capture first"):
            s.close()
        assert not s.is_closed
        b.memset(1, stream=s)                 # the capture still records
    assert bc.is_capturing(s) is False
    assert len(g.nodes()) >= 1 if hasattr(g, "nodes") else True
    b.close()
    s.close()                                 # after the capture: closes
    assert s.is_closed
    g.close() if hasattr(g, "close") else None


def test_close_after_failed_capture_allowed(fake):
    s = bc.Stream()
    with pytest.raises(RuntimeError):
        with s.capture():
            raise RuntimeError("the block failed")
    s.close()                                 # the count went back down on the error path
    assert s.is_closed


def test_nested_capture_refused(fake):
    s = bc.Stream()
    with s.capture() as g:
        begins = fake.calls("cuStreamBeginCapture")
        with pytest.raises(ValueError, match="already capturing"):
            with s.capture():
                pass
        assert fake.calls("cuStreamBeginCapture") == begins     # refused before the driver
        assert bc.is_capturing(s)                               # the running capture goes on
    assert not bc.is_capturing(s)
    s.close()
    g.close() if hasattr(g, "close") else None


def test_captures_on_two_streams_still_run(fake):
    a, b = bc.Stream(), bc.Stream()
    with a.capture() as ga:
        with b.capture() as gb:
            assert bc.is_capturing(a) and bc.is_capturing(b)
    for g in (ga, gb):
        g.close() if hasattr(g, "close") else None
    a.close()
    b.close()
