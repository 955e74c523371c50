"""asyncio: `async with client.lock(...)` never blocks the event loop;
tasks exclude each other; a cancelled waiter's acquisition is cancelled
and leaves nothing held."""
import asyncio
import threading
import time

import pytest

import libredlock
from libredlock import LockTaken, WaitTimeout
from support import wait_for


async def heartbeat(stop, gaps):
    last = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(0.01)
        now = time.monotonic()
        gaps.append(now - last)
        last = now


def test_tasks_exclude_and_loop_stays_free(masters, client_of):
    c = client_of(masters, retry_delay=0.01, retry_jitter=0.005)
    other = client_of(masters)

    async def main():
        stop = asyncio.Event()
        gaps = []
        hb = asyncio.create_task(heartbeat(stop, gaps))
        inside = [0]
        windows = []
        # Another client holds the key for 1.5 s first (released by a
        # thread of its own): every task waits in the library meanwhile. A
        # blocking wait on the loop would show as a heartbeat gap of about
        # that long.
        first = other.lock("async-key", ttl=10).acquire()
        timer = threading.Timer(1.5, first.release)
        timer.start()

        async def task(i):
            for _ in range(4):
                async with c.lock("async-key", ttl=10, wait=10) as lock:
                    t0 = time.monotonic()
                    inside[0] += 1
                    assert inside[0] == 1, "two tasks inside"
                    assert lock.held
                    await asyncio.sleep(0.003)
                    inside[0] -= 1
                    windows.append((t0, time.monotonic()))

        await asyncio.wait_for(asyncio.gather(*(task(i) for i in range(8))),
                               120)
        timer.join()
        stop.set()
        await hb
        return gaps, windows

    gaps, windows = asyncio.run(main())
    assert len(windows) == 32
    windows.sort()
    for (s0, e0), (s1, _) in zip(windows, windows[1:]):
        assert s1 >= e0
    # A blocked loop would show a gap of about 1.5 s.
    assert max(gaps) < 1.0, max(gaps)


def test_async_errors_and_client(masters):
    async def main():
        async with libredlock.Client(masters.addrs, restart_guard=-1) as c:
            async with c.lock("async-e", ttl=5) as held:
                with pytest.raises(LockTaken) as ei:
                    async with c.lock("async-e", ttl=5, wait=0):
                        pass
                assert ei.value.results
                assert held.held
            await c.lock("async-e", ttl=5).aacquire()
        assert c.closed
    asyncio.run(main())


def test_cancelled_waiter_leaves_nothing(masters, client_of):
    """A task waiting for a lock is cancelled (asyncio.wait_for). Its
    acquisition is cancelled too (issue 35: it used to go on in the
    background until the holder released, and got a grant for nobody):
    when the holder releases, another client takes the lock, and client c
    was granted nothing."""
    c = client_of(masters, retry_delay=0.02)
    other = client_of(masters)

    async def main():
        holder = other.lock("async-c", ttl=10).acquire()
        lk = c.lock("async-c", ttl=30, wait=20)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(lk.aacquire(), 0.3)
        # The acquisition ends (canceled), long before its 20 s wait.
        end = time.monotonic() + 10
        while c.stats().canceled == 0:
            assert time.monotonic() < end, "the acquisition to be canceled"
            await asyncio.sleep(0.005)
        holder.release()
        third = other.lock("async-c", ttl=5, wait=20)
        await third.aacquire()
        await third.arelease()
        return lk

    lk = asyncio.run(main())
    assert not lk.held
    assert c.stats().grants == 0
    wait_for(lambda: all(m.cmd("EXISTS", "async-c") == 0 for m in masters),
             10, "nothing left on the masters")


def test_wait_timeout_in_async(masters, client_of):
    c = client_of(masters)
    other = client_of(masters)

    async def main():
        with other.lock("async-t", ttl=10):
            t0 = time.monotonic()
            with pytest.raises(WaitTimeout):
                async with c.lock("async-t", ttl=5, wait=0.5):
                    pass
            return time.monotonic() - t0
    assert asyncio.run(main()) >= 0.5
