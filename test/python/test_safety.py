"""Issue 35: the binding stays safe when the client is closed under a
running block, and when a thread holds the GIL while a lock is lost (no
Python code runs on the library's loop thread)."""
import threading
import time

import pytest

from libredlock import Lost


def test_close_under_with_sets_lost_before_the_release(masters, client_of):
    """close() releases the locks held: the block must learn it before
    another client can take the lock, and its `with` must raise."""
    c1 = client_of(masters)
    c2 = client_of(masters)
    lock = c1.lock("safety-close", ttl=10)
    inside, stop = threading.Event(), threading.Event()
    out = {"polls": 0}

    def body():
        try:
            with lock:
                inside.set()
                while not lock.lost.is_set() and not stop.is_set():
                    out["polls"] += 1
                    time.sleep(0.001)
        except BaseException as e:   # noqa: B902 (inspected below)
            out["exc"] = e

    th = threading.Thread(target=body, daemon=True)
    th.start()
    try:
        assert inside.wait(10), "the block never started"
        c1.close()
        other = c2.lock("safety-close", ttl=10, wait=5).acquire()
        lost_at_grant = lock.lost.is_set()
        polls_at_grant = out["polls"]
        # The block may poll a little longer: it must end by itself.
        th.join(5)
        alive = th.is_alive()
    finally:
        stop.set()
        th.join(10)
    other.release()
    assert lost_at_grant, (
        f"another client got the lock while lock.lost was unset (the "
        f"block had polled {polls_at_grant} times)")
    assert not alive, "the block did not see lost within 5 s"
    exc = out.get("exc")
    assert isinstance(exc, Lost), f"the with exited with {exc!r}"
    assert exc.code == "ECANCELED"
    assert lock.lost_reason == "ECANCELED"


def test_close_under_election_sets_deposed(masters, client_of):
    c1 = client_of(masters)
    c2 = client_of(masters)
    e = c1.campaign("safety-elect", "one", ttl=10, wait=10)
    assert e.is_leader and not e.deposed.is_set()
    c1.close()
    deposed = e.deposed.is_set()
    e2 = c2.campaign("safety-elect", "two", ttl=10, wait=5)
    try:
        assert deposed, ("the leader's client was closed and deposed is "
                         "unset (is_leader=%s)" % e.is_leader)
        assert not e.is_leader
        assert e.deposed_reason == "ECANCELED"
    finally:
        e2.resign()


def _gil_hog_size(seconds):
    """How many numbers sum(range(n)) adds in about `seconds` here: one
    call that holds the GIL throughout (it never lets another thread
    run)."""
    n = 2 * 10**6
    best = min(_timed(lambda: sum(range(n))) for _ in range(3))
    return max(n, int(n * seconds / max(best, 1e-6)))


def _timed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def test_gil_holder_does_not_stop_other_extensions(masters, client_of):
    """Lock X is lost while the main thread holds the GIL for ~3 s; lock Y
    (ttl 1.2 s, untouched) must still be extended all along: nothing on
    the library's loop thread may wait for the GIL."""
    c = client_of(masters)
    y = c.lock("safety-gil-y", ttl=1.2).acquire()
    ytok = y.token
    n = _gil_hog_size(3.0)
    for attempt in range(3):
        # X is extended every 200 ms: its next extension finds the keys
        # gone while the GIL is held below.
        x = c.lock(f"safety-gil-x{attempt}", ttl=0.6).acquire()
        for m in masters:
            m.cmd("DEL", f"safety-gil-x{attempt}")
        if x.lost.is_set():   # lost before the hog began: again
            continue
        t0 = time.monotonic()
        sum(range(n))
        held_for = time.monotonic() - t0
        kept = masters.holding("safety-gil-y", ytok)
        break
    else:
        pytest.fail("X was lost before the GIL was taken, 3 times")
    assert held_for > 1.5, f"the GIL was held {held_for:.2f} s only"
    assert x.lost.wait(10), "X's loss was never reported"
    assert x.lost_reason == "ENOTHELD"
    assert kept >= 2, (
        f"Y was not extended while the GIL was held {held_for:.2f} s "
        f"(X's loss waited for it): Y's key left on {kept} of 3 masters")
    assert not y.lost.is_set()
    y.release()
