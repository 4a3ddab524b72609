"""MemoryPool.trim() gives back its spare events; DriverMemoryPool's release threshold
can be changed after the pool is made (driver double)."""
import gc

import pytest

import barecuda as bc


def test_trim_destroys_the_spare_events(fake):
    pool = bc.MemoryPool(0)
    s1, s2 = bc.Stream(), bc.Stream()
    before = fake.live("event")
    # Blocks cached on s1, then asked for from s2: the pool records events on s1.
    bufs = [pool.alloc(4096, stream=s1) for _ in range(6)]
    for b in bufs:
        b.close()
    s1.synchronize()
    got = []
    for _ in range(12):                  # first pass records events, later ones take blocks
        got.append(pool.alloc(4096, stream=s2))
    for b in got:
        b.close()
    assert pool.stats()["cross_stream_reuses"] > 0
    assert fake.live("event") > before   # events on the pool's free list
    pool.trim()
    assert fake.live("event") == before
    assert pool.stats()["reserved"] == 0


def test_close_destroys_the_spare_events(fake):
    pool = bc.MemoryPool(0)
    s1, s2 = bc.Stream(), bc.Stream()
    before = fake.live("event")
    b = pool.alloc(512, stream=s1)
    b.close()
    s1.synchronize()
    pool.alloc(512, stream=s2).close()
    pool.alloc(512, stream=s2).close()
    pool.close()
    assert fake.live("event") == before


def test_release_threshold_can_change(fake):
    pool = bc.DriverMemoryPool(0, release_threshold=1 << 20)
    assert pool.stats()["release_threshold"] == 1 << 20
    pool.set_release_threshold(64 << 20)
    assert pool.stats()["release_threshold"] == 64 << 20
    pool.set_release_threshold(0)
    assert pool.stats()["release_threshold"] == 0
    pool.set_release_threshold(None)
    assert pool.stats()["release_threshold"] == (1 << 64) - 1
    with pytest.raises(ValueError, match="release threshold"):
        pool.set_release_threshold(-1)
    del pool
    gc.collect()
