"""Threads: 16 threads on one client contend for one key (no deadlock,
no crash, never two inside); the GIL is released while a call waits."""
import threading
import time

import pytest

from libredlock import RedlockError, WaitTimeout


def test_16_threads_one_client(masters, client_of):
    c = client_of(masters, retry_delay=0.01, retry_jitter=0.005)
    inside = [0]
    windows = []
    errors = []
    mu = threading.Lock()

    def worker(i):
        try:
            for _ in range(6):
                with c.lock("contended", ttl=10, wait=60) as lock:
                    start = time.monotonic()
                    with mu:
                        inside[0] += 1
                        if inside[0] != 1:
                            errors.append(f"thread {i}: {inside[0]} inside")
                    assert lock.validity > 0
                    time.sleep(0.002)
                    with mu:
                        inside[0] -= 1
                    windows.append((start, time.monotonic()))
        except Exception as e:   # reported below, with the thread
            errors.append(f"thread {i}: {e!r}")

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(150)
    assert not any(t.is_alive() for t in ths), "deadlock: threads left"
    assert errors == []
    assert len(windows) == 16 * 6
    windows.sort()
    for (s0, e0), (s1, e1) in zip(windows, windows[1:]):
        assert s1 >= e0, "two holders at once"


def test_gil_released_while_waiting(masters, client_of):
    """Two threads wait 1.5 s each for a taken lock at the same time: if
    the GIL were held during the wait they would run one after the other
    (and the main thread would stall)."""
    holder = client_of(masters)
    c = client_of(masters)
    spans = {}
    with holder.lock("gil-a", ttl=30), holder.lock("gil-b", ttl=30):
        def wait(name):
            t0 = time.monotonic()
            with pytest.raises(WaitTimeout):
                c.lock(name, ttl=5, wait=1.5).acquire()
            spans[name] = (t0, time.monotonic())
        ths = [threading.Thread(target=wait, args=(n,))
               for n in ("gil-a", "gil-b")]
        ticks = 0
        for t in ths:
            t.start()
        # Python work in the main thread meanwhile.
        while any(t.is_alive() for t in ths):
            ticks += 1
            sum(range(100))
        for t in ths:
            t.join()
    (a0, a1), (b0, b1) = spans["gil-a"], spans["gil-b"]
    overlap = min(a1, b1) - max(a0, b0)
    assert overlap > 1.0, (spans, overlap)   # they waited together
    assert ticks > 1000


def test_one_lock_object_many_threads(masters, client_of):
    """Getters from 8 threads while another releases the same lock: each
    gets a value or None, never a crash; the lock ends released."""
    c = client_of(masters)
    for round_ in range(5):
        lock = c.lock("shared-obj", ttl=10).acquire()
        stop = threading.Event()
        seen = []

        def poll():
            while not stop.is_set():
                seen.append((lock.validity, lock.fence, lock.token))
                try:
                    lock.extend(10)
                except RedlockError:
                    pass   # released meanwhile: "not held"

        ths = [threading.Thread(target=poll) for _ in range(8)]
        for t in ths:
            t.start()
        time.sleep(0.02)
        lock.release()
        stop.set()
        for t in ths:
            t.join(30)
        assert not any(t.is_alive() for t in ths)
        assert lock.validity == 0.0 and lock.token is None
        assert seen
    with c.lock("shared-obj", ttl=5, wait=0):
        pass
