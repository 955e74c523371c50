"""Acquire, extend, release; exclusion; the exception's per-master
explanation; the context manager's release, also on exceptions."""
import time

import pytest

import libredlock
from libredlock import LockTaken, WaitTimeout
from support import wait_for


def test_acquire_extend_release(masters, client_of):
    c = client_of(masters)
    lock = c.lock("job-1", ttl=10)
    assert not lock.held and lock.validity == 0.0 and lock.token is None
    lock.acquire()
    token = lock.token
    assert len(token) == 40
    # Decided at quorum: the third SET may land a moment later.
    wait_for(lambda: masters.holding("job-1", token) == 3, 5,
             "the key on every master")
    assert 9.0 < lock.validity <= 10.0
    assert 1 <= masters[0].cmd("PTTL", "job-1") <= 10000
    lock.extend(60)
    assert 50.0 < lock.validity <= 60.0
    wait_for(lambda: all(m.cmd("PTTL", "job-1") > 50000 for m in masters),
             5, "the extension on every master")
    lock.release()
    wait_for(lambda: masters.holding("job-1", token) == 0, 5,
             "the key gone everywhere")
    assert not lock.held and lock.validity == 0.0
    # A lock object can be acquired again.
    with lock:
        assert lock.held and lock.token != token


def test_exclusion_and_results(masters, client_of):
    a = client_of(masters)
    b = client_of(masters)
    with a.lock("job-2", ttl=10):
        with pytest.raises(LockTaken) as ei:
            b.lock("job-2", ttl=10, wait=0).acquire()
        e = ei.value
        assert e.code == "ETAKEN"
        assert "held by another owner" in str(e)
        assert len(e.results) == 3
        assert {r.server for r in e.results} == set(masters.addrs)
        # Decided once a quorum was impossible; a master b is still
        # connecting to (a loaded machine) may show as an error.
        assert sum(r.vote == "no" for r in e.results) >= 2, e.results
        assert "yes" not in [r.vote for r in e.results], e.results
    # Released at the end of the block: b gets it now.
    with b.lock("job-2", ttl=10, wait=0) as lb:
        assert lb.held


def test_released_on_exception(masters, client_of):
    c = client_of(masters)
    lock = c.lock("job-3", ttl=10)
    with pytest.raises(ZeroDivisionError):
        with lock:
            token = lock.token
            assert masters.holding("job-3", token) >= 2
            1 / 0
    wait_for(lambda: masters.holding("job-3", token) == 0, 5,
             "the key released everywhere")
    assert not lock.held


def test_auto_extension_outlives_ttl(masters, client_of):
    """A 1 s lock held for 2.5 s is still ours on every master: the block
    keeps it extended (without auto-extension it would expire)."""
    c = client_of(masters)
    with c.lock("job-4", ttl=1) as lock:
        token = lock.token
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            assert lock.validity > 0 and not lock.lost.is_set()
            time.sleep(0.05)
        assert masters.holding("job-4", token) >= 2
    no_ext = c.lock("job-4b", ttl=1, auto_extend=False)
    no_ext.acquire()
    t = no_ext.token
    wait_for(lambda: masters.holding("job-4b", t) == 0, 5,
             "a lock without auto-extension to expire")


def test_wait_deadline(masters, client_of):
    """wait=W: kept trying until W, never giving up before it; the
    exception shows the last attempt's votes."""
    a = client_of(masters)
    b = client_of(masters)
    with a.lock("job-5", ttl=30):
        t0 = time.monotonic()
        with pytest.raises(WaitTimeout) as ei:
            b.lock("job-5", ttl=5, wait=1.0).acquire()
        took = time.monotonic() - t0
        assert took >= 1.0
        assert took < 10.0   # a bound for a loaded machine, not a figure
        assert ei.value.code == "ETIMEDOUT"
        assert sum(r.vote == "no" for r in ei.value.results) >= 2
        # wait=0: one attempt, no retry delay.
        t0 = time.monotonic()
        with pytest.raises(LockTaken):
            b.lock("job-5", ttl=5, wait=0).acquire()
        assert time.monotonic() - t0 < 1.0


def test_wait_succeeds_when_released(masters, client_of):
    """A waiter gets the lock soon after the holder releases it (wake-up),
    well before its deadline."""
    import threading
    a = client_of(masters)
    b = client_of(masters)
    la = a.lock("job-6", ttl=30).acquire()
    got = {}

    def waiter():
        t0 = time.monotonic()
        with b.lock("job-6", ttl=5, wait=20) as lb:
            got["after"] = time.monotonic() - t0
            got["held"] = lb.held
    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.3)   # the waiter is refused meanwhile (not a sync point)
    la.release()
    th.join(30)
    assert not th.is_alive()
    assert got["held"]
    assert got["after"] < 15


def test_multi_resource(masters, client_of):
    c = client_of(masters)
    d = client_of(masters)
    with c.lock(["m-a", "m-b"], ttl=10) as m:
        assert m.name == ("m-a", "m-b")
        with pytest.raises(LockTaken):
            d.lock("m-b", ttl=10, wait=0).acquire()
        with pytest.raises(LockTaken):
            d.lock(["m-c", "m-a"], ttl=10, wait=0).acquire()
        # m-c was not left behind by the refused multi-lock.
        with d.lock("m-c", ttl=10, wait=0):
            pass
    with d.lock("m-b", ttl=10, wait=0):
        pass


def test_binary_and_unicode_names(masters, client_of):
    c = client_of(masters)
    with c.lock(b"bin\x00ary", ttl=5) as l1:
        assert sum(m.cmd("EXISTS", b"bin\x00ary") for m in masters) >= 2
        assert l1.name == "bin\x00ary"
    with c.lock("zürich-ジョブ", ttl=5) as l2:
        assert sum(m.cmd("EXISTS", "zürich-ジョブ".encode())
                   for m in masters) >= 2
        assert l2.held


def test_key_prefix_and_repr(masters, client_of):
    c = client_of(masters, key_prefix="app:")
    with c.lock("x", ttl=5) as lock:
        assert sum(m.cmd("EXISTS", "app:x") for m in masters) >= 2
        assert "held" in repr(lock)
    assert "open" in repr(c)
    # the C library and the binding are one release (meson.build's version)
    assert libredlock.c_version() == libredlock.__version__


def test_unreferenced_held_lock_is_released(masters, client_of):
    """A held Lock that is garbage collected (nobody can release it any
    more) is released, not extended for as long as the process lives."""
    import gc
    c = client_of(masters)
    lock = c.lock("gc-me", ttl=30).acquire()
    tok = lock.token
    del lock
    gc.collect()
    wait_for(lambda: masters.holding("gc-me", tok) == 0, 5,
             "the abandoned lock to be released")
