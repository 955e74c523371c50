"""The lost-lock signal: lock.lost is set when the masters stop answering
(a majority paused: no extension possible) or when the key is found gone;
the block's exit then raises Lost."""
import threading
import time

import pytest

from libredlock import Lost
from support import wait_for


def test_lost_when_majority_paused(masters, client_of):
    c = client_of(masters, command_timeout=0.1)
    lock = c.lock("lost-1", ttl=1.5)
    with pytest.raises(Lost) as ei:
        with lock:
            acquired = time.monotonic()
            validity = lock.validity
            assert not lock.lost.is_set()
            masters[0].pause()
            masters[1].pause()
            try:
                # Set a margin BEFORE the validity ends (default ttl/10),
                # so the work can stop while the lock still protects it.
                assert lock.lost.wait(10), "lost was never set"
                seen = time.monotonic()
                assert lock.lost_reason == "EEXPIRED"
                assert lock.validity == 0.0
                assert not lock.held
            finally:
                masters[0].resume()
                masters[1].resume()
    assert seen - acquired < validity   # before the validity ended
    assert ei.value.code == "EEXPIRED"
    assert "lost while the block ran" in str(ei.value)


def test_lost_when_key_gone(masters, client_of):
    """The key deleted on a majority: the next extension (every ttl/3)
    finds it and the lock is lost at once (ENOTHELD), long before the ttl
    would have run out."""
    c = client_of(masters)
    lock = c.lock("lost-2", ttl=3)
    t0 = time.monotonic()
    with pytest.raises(Lost):
        with lock:
            tok = lock.token
            wait_for(lambda: masters.holding("lost-2", tok) == 3, 5,
                     "the key everywhere")
            for m in masters[:2]:
                m.cmd("DEL", "lost-2")
            assert lock.lost.wait(10)
            assert lock.lost_reason == "ENOTHELD"
            assert time.monotonic() - t0 < 3
    assert lock.token is None and not lock.held
    assert masters.holding("lost-2", tok) <= 1


def test_body_exception_wins_over_lost(masters, client_of):
    c = client_of(masters)
    lock = c.lock("lost-3", ttl=3)
    with pytest.raises(KeyError):
        with lock:
            for m in masters:
                m.cmd("DEL", "lost-3")
            assert lock.lost.wait(10)
            raise KeyError("the body's own error")


def test_lost_event_wakes_a_waiting_thread(masters, client_of):
    """lost is a threading.Event: a supervisor thread can wait on it."""
    c = client_of(masters)
    lock = c.lock("lost-4", ttl=3).acquire()
    woke = []
    th = threading.Thread(target=lambda: woke.append(lock.lost.wait(20)))
    th.start()
    for m in masters:
        m.cmd("DEL", "lost-4")
    th.join(20)
    assert woke == [True]
    with pytest.raises(Lost):
        lock.release()   # nothing of ours was found
    # A new acquisition on the same object starts with a clear signal.
    with lock:
        assert not lock.lost.is_set() and lock.held


def test_explicit_extend_of_lost_lock(masters, client_of):
    c = client_of(masters)
    lock = c.lock("lost-5", ttl=5, auto_extend=False).acquire()
    for m in masters:
        m.cmd("DEL", "lost-5")
    with pytest.raises(Lost) as ei:
        lock.extend(5)
    assert ei.value.code == "ENOTHELD"
    assert len(ei.value.results) == 3
