"""Counting semaphores (issue 32): at most K holders across threads and
clients, ``with`` and ``async with``, ``.permit``, the status, another
limit (LimitMismatch naming both), the limit changed, one permit forced
open (its holder's ``lost`` is set), a cancelled async waiter gets
nothing."""
import asyncio
import threading
import time

import pytest

from support import wait_for  # noqa: E402

import libredlock
from libredlock import (ConfigError, LimitMismatch, LockTaken, Semaphore,
                        SemaphoreStatus)


def test_k_holders_then_taken(masters, client_of):
    a = client_of(masters)
    b = client_of(masters)
    s1 = a.semaphore("sem", 2, ttl=10, wait=0).acquire()
    s2 = b.semaphore("sem", 2, ttl=10, wait=0).acquire()
    assert isinstance(s1, Semaphore) and s1.limit == 2
    assert {s1.permit, s2.permit} == {0, 1}
    assert "holding permit" in repr(s1)

    # An acquisition is decided at a quorum (2 of 3): its last SET lands
    # a moment later. Each permit on every master, before the next one.
    def on_all():
        st = a.semaphore_status("sem", 2)
        by = {p.index: p for p in st.permits}
        return (len(by) == 2 and all(p.masters == 3 for p in by.values())
                and st)
    wait_for(on_all, 10, "both permits on every master")
    with pytest.raises(LockTaken):
        b.semaphore("sem", 2, ttl=10, wait=0).acquire()
    st = a.semaphore_status("sem", 2)
    assert isinstance(st, SemaphoreStatus)
    assert (st.limit, st.held, st.free) == (2, 2, 0)
    assert sorted(p.index for p in st.permits) == [0, 1]
    by = {p.index: p for p in st.permits}
    assert by[s1.permit].holder == s1.token
    assert by[s1.permit].held and by[s1.permit].masters == 3
    assert 0 < by[s1.permit].ttl <= 10
    s1.release()
    assert s1.permit is None
    with b.semaphore("sem", 2, ttl=10, wait=0) as s3:
        assert s3.permit in (0, 1) and s3.permit != s2.permit
    s2.release()
    # A release is decided at a quorum too: the last DEL lands after.
    st = wait_for(lambda: (lambda st: st.permits == () and st)(
        a.semaphore_status("sem", 2)), 10, "every permit released")
    assert (st.limit, st.held, st.free, st.permits) == (2, 0, 2, ())


def test_bad_arguments(masters, client_of):
    c = client_of(masters)
    for bad in (0, 1025, -1):
        with pytest.raises(ConfigError):
            c.semaphore("x", bad)
    with pytest.raises(TypeError):
        c.semaphore("x", 2.0)
    with pytest.raises(TypeError):
        c.semaphore("x", True)
    with pytest.raises(ConfigError):
        c.semaphore_force_release("x", 2, -1)


def test_at_most_k_with_threads(masters, client_of):
    """K = 2, 7 threads on two clients, 3 rounds each: never more than K
    inside at once, and K at some point."""
    clients = [client_of(masters, retry_delay=0.01, retry_jitter=0.005)
               for _ in range(2)]
    k = 2
    state = {"in": 0, "most": 0, "bad": [], "done": 0}
    mu = threading.Lock()

    def worker(i):
        c = clients[i % 2]
        for _ in range(3):
            with c.semaphore("pool", k, ttl=10, wait=30) as s:
                with mu:
                    state["in"] += 1
                    state["most"] = max(state["most"], state["in"])
                    if state["in"] > k:
                        state["bad"].append(state["in"])
                    if not 0 <= s.permit < k:
                        state["bad"].append(("permit", s.permit))
                time.sleep(0.05)
                with mu:
                    state["in"] -= 1
            with mu:
                state["done"] += 1

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(7)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(90)
    assert state["done"] == 21
    assert state["bad"] == []
    assert state["most"] == k


def test_async_with(masters, client_of):
    c = client_of(masters, retry_delay=0.01, retry_jitter=0.005)
    k = 2
    state = {"in": 0, "most": 0}

    async def job():
        async with c.semaphore("apool", k, ttl=10, wait=30) as s:
            assert 0 <= s.permit < k
            state["in"] += 1
            state["most"] = max(state["most"], state["in"])
            assert state["in"] <= k
            await asyncio.sleep(0.1)
            state["in"] -= 1

    async def main():
        await asyncio.gather(*(job() for _ in range(6)))

    asyncio.run(main())
    assert state["most"] == k


def test_limit_mismatch_names_both(masters, client_of):
    c = client_of(masters)
    with c.semaphore("lim", 2, ttl=10, wait=0):
        pass
    with pytest.raises(LimitMismatch) as ei:
        c.semaphore("lim", 3, ttl=10, wait=5).acquire()
    msg = str(ei.value)
    assert "2 on this master, 3 asked" in msg, msg
    assert ei.value.code == "ELIMIT"
    assert isinstance(ei.value, ConfigError)
    assert any(r.error == "ELIMIT" for r in ei.value.results)
    # Changed for everyone: 3 works, 2 is refused.
    c.semaphore_set_limit("lim", 3)
    assert c.semaphore_status("lim", 3).limit == 3
    with c.semaphore("lim", 3, ttl=10, wait=0):
        pass
    with pytest.raises(LimitMismatch):
        c.semaphore("lim", 2, ttl=10, wait=0).acquire()


def test_force_release_sets_lost(masters, client_of):
    a = client_of(masters)
    b = client_of(masters)
    s = a.semaphore("fr", 2, ttl=1.5, wait=0).acquire()
    p = s.permit
    b.semaphore_force_release("fr", 2, p)
    st = b.semaphore_status("fr", 2)
    assert st.held == 0 and st.free == 2
    # Its next extension (every ttl/3) finds it gone.
    assert s.lost.wait(5)
    assert s.lost_reason == "ENOTHELD"
    with pytest.raises(libredlock.Lost):
        s.release()


def test_cancelled_async_waiter_gets_nothing(masters, client_of):
    """A task waiting for a full semaphore, cancelled (wait_for): its
    acquisition ends, and nothing is granted to it after the holder
    leaves (the lock's cancel machinery)."""
    a = client_of(masters)
    b = client_of(masters)
    held = a.semaphore("full", 1, ttl=10, wait=0).acquire()
    waiter = b.semaphore("full", 1, ttl=10, wait=30)

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(waiter.aacquire(), 0.3)

    asyncio.run(main())
    # The abandoned acquisition has ended (canceled) before the release:
    # nothing of it is left to take the permit afterwards.
    wait_for(lambda: b.stats().canceled >= 1, 10,
             "the abandoned acquisition to be canceled")
    held.release()
    assert waiter.permit is None
    st = a.semaphore_status("full", 1)
    assert (st.held, st.free) == (0, 1)
    with a.semaphore("full", 1, ttl=10, wait=0) as s:
        assert s.permit == 0
