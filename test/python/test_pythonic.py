"""Python that behaves like Python (issue 33): Client() from the CLI's
REDLOCK_* variables, the CLI's ttl rule, threading's and redis-py's
spellings (acquire(blocking, timeout), owned(), locked(), a wait without
end), WaitTimeout a TimeoutError, inspect and force_unlock, the
synchronize decorator, a release from another thread."""
import asyncio
import math
import os
import threading
import time

import pytest

import libredlock
from libredlock import ConfigError, WaitTimeout
import support


def test_client_from_the_environment(make_masters, workdir, monkeypatch):
    ms = make_masters(3, password="s3cret")
    monkeypatch.delenv("REDLOCK_SERVERS", raising=False)
    with pytest.raises(ConfigError) as ei:
        libredlock.Client()
    assert "REDLOCK_SERVERS" in str(ei.value)
    pf = os.path.join(workdir, "password")
    with open(pf, "w") as fh:
        fh.write("s3cret\n")
    monkeypatch.setenv("REDLOCK_SERVERS", ",".join(ms.addrs))
    monkeypatch.setenv("REDLOCK_PASSWORD_FILE", pf)
    monkeypatch.setenv("REDLOCK_RESTART_GUARD", "off")
    monkeypatch.setenv("REDLOCK_MAX_TTL", "1m")
    with libredlock.Client() as c:
        assert list(c.servers) == ms.addrs
        with c.lock("env", ttl=5, wait=10) as lock:
            # A quorum at least (a fresh client: the third master's
            # connection may still be on its way).
            assert ms.holding("env", lock.token) >= 2
        # The cap from REDLOCK_MAX_TTL (1 min), as the CLI's.
        with pytest.raises(ConfigError):
            c.lock("env", ttl=120).acquire()
    # An explicit argument wins over the environment.
    with libredlock.Client(password="wrong", command_timeout=0.5) as c:
        with pytest.raises(libredlock.AuthenticationError):
            c.lock("env2", ttl=5, wait=5).acquire()
    # Bad values: errors naming the variable, as the CLI's exit 78.
    for var, bad in (("REDLOCK_TLS_INSECURE", "maybe"),
                     ("REDLOCK_MAX_TTL", "2x"),
                     ("REDLOCK_RESTART_GUARD", "soon")):
        monkeypatch.setenv(var, bad)
        with pytest.raises(ConfigError) as ei:
            libredlock.Client()
        assert var in str(ei.value)
        monkeypatch.delenv(var)
    monkeypatch.setenv("REDLOCK_PASSWORD_FILE",
                       os.path.join(workdir, "missing"))
    with pytest.raises(ConfigError) as ei:
        libredlock.Client()
    assert "REDLOCK_PASSWORD_FILE" in str(ei.value)


def test_the_clis_ttl_rule(masters, client_of):
    c = client_of(masters, command_timeout=0.05)
    for short in (0.05, 0.099):
        with pytest.raises(ConfigError) as ei:
            c.lock("short", ttl=short)
        assert "at least 0.1 s" in str(ei.value)
    c.lock("short", ttl=0.1)
    with pytest.raises(ConfigError):
        c.campaign("short-e", "a", ttl=0.05)
    # Two command timeouts: 0.5 s -> 1 s at least.
    c2 = client_of(masters, command_timeout=0.5)
    with pytest.raises(ConfigError) as ei:
        c2.lock("short", ttl=0.9)
    assert "at least 1 s" in str(ei.value)
    c2.lock("short", ttl=1.0)


def test_threading_spellings(masters, client_of):
    c = client_of(masters)
    other = client_of(masters)
    lock = c.lock("spell", ttl=10)
    assert not lock.owned() and not lock.locked()
    assert lock.acquire(blocking=False)
    assert lock.owned() and lock.locked()
    theirs = other.lock("spell", ttl=10)
    assert not theirs.owned() and theirs.locked()
    assert theirs.acquire(blocking=False) is False
    t0 = time.monotonic()
    assert theirs.acquire(timeout=0.3) is False
    assert time.monotonic() - t0 >= 0.3
    with pytest.raises(TimeoutError):   # WaitTimeout is one
        other.lock("spell", ttl=10, wait=0.3).acquire()
    with pytest.raises(ValueError):
        theirs.acquire(blocking=False, timeout=1)
    # A wait without end: timeout=-1 (threading), wait=-1, wait=math.inf.
    for waiter in (lambda: theirs.acquire(timeout=-1),
                   lambda: other.lock("spell", ttl=10, wait=-1).acquire(),
                   lambda: other.lock("spell", ttl=10,
                                      wait=math.inf).acquire()):
        got = {}

        def run():
            got["lock"] = waiter()
        base = other.stats().taken
        th = threading.Thread(target=run)
        th.start()
        # Past the first slice of a second: it still waits.
        support.wait_for(lambda: other.stats().taken > base + 2, 10,
                         "the waiter to wait")
        lock.release()
        th.join(15)
        assert not th.is_alive() and got["lock"]
        assert got["lock"].owned()
        got["lock"].release()
        lock.acquire()
    lock.release()
    assert not lock.locked()


def test_a_wait_without_end_outlasts_a_slice(masters, client_of):
    """wait=-1 goes on past the 1 s slices (and the old default's 0.64 s)
    until the holder leaves at about 2.5 s."""
    c = client_of(masters)
    holder = c.lock("forever", ttl=30).acquire()
    got = {}

    def run():
        t = time.monotonic()
        got["lock"] = c.lock("forever", ttl=10, wait=-1).acquire()
        got["took"] = time.monotonic() - t
    th = threading.Thread(target=run)
    th.start()
    end = time.monotonic() + 2.5
    support.wait_for(lambda: time.monotonic() > end, 5, "2.5 s")
    assert th.is_alive()
    holder.release()
    th.join(15)
    assert got["took"] >= 2.5
    got["lock"].release()


def test_inspect_and_force_unlock(masters, client_of):
    c = client_of(masters)
    other = client_of(masters, command_timeout=0.2)
    st = c.inspect("forced")
    assert not st.held and st.holder == "" and st.masters == 0
    lock = other.lock("forced", ttl=3).acquire()
    # Granted on a quorum: the third master's SET may still be on its way.
    support.wait_for(lambda: c.inspect("forced").masters == 3, 10,
                     "every master to hold the grant")
    st = c.inspect("forced")
    assert st.held and st.holder == lock.token and st.masters == 3
    assert 0 < st.ttl <= 3
    assert len(st.per_master) == 3
    c.force_unlock("forced")
    assert not c.inspect("forced").held
    assert not c.lock("forced").locked()
    # The holder learns it at its next extension.
    assert lock.lost.wait(10)
    assert lock.lost_reason == "ENOTHELD"
    with pytest.raises(libredlock.Lost):
        lock.release()
    with pytest.raises(TypeError):
        c.rwlock("forced").read().locked()


def test_holder_shown_by_inspect(masters, client_of):
    """holder= names who holds a lock (issue 33): in the value
    "<40 hex>.<holder>", which inspect (a client that saw nothing) reads
    back; a semaphore's permits and a read-write side take it too."""
    c = client_of(masters)
    other = client_of(masters)
    with c.lock("who", ttl=5, holder="web-1:4242") as lock:
        assert lock.token.endswith(".web-1:4242")
        assert libredlock.token_holder(lock.token) == "web-1:4242"
        st = other.inspect("who")
        assert st.held and st.holder == lock.token
        assert st.holder_id == "web-1:4242"
    with c.lock("who", ttl=5) as lock:   # none: 40 hex alone
        assert len(lock.token) == 40
        assert other.inspect("who").holder_id is None
    with c.semaphore("who-pool", 2, ttl=5, holder="batch \u00e9") as sem:
        permits = other.semaphore_status("who-pool", 2).permits
        assert [p.holder_id for p in permits] == ["batch \u00e9"]
        assert sem.token.endswith(".batch \u00e9")
    with c.rwlock("who-rw").read(ttl=5, holder="reader-1") as r:
        assert r.token.endswith(".reader-1")
    for bad in ("", "x" * 81, "\u00e9" * 41):   # 82 bytes in UTF-8
        with pytest.raises(ConfigError):
            c.lock("who", holder=bad)
    with pytest.raises(TypeError):
        c.lock("who", holder=b"bytes")
    assert libredlock.token_holder("0" * 40) is None
    assert libredlock.token_holder("my-uuid.web") is None


def test_synchronize_decorator(masters, client_of):
    c = client_of(masters)
    other = client_of(masters)
    seen = []

    @c.synchronize("deco", ttl=5, wait=5)
    def work(x):
        """Work under the lock."""
        seen.append(other.lock("deco").acquire(blocking=False))
        return x * 2
    assert work(21) == 42 and seen == [False]
    assert work.__name__ == "work" and "under the lock" in work.__doc__
    assert not other.lock("deco").locked()

    @c.synchronize("deco-async", ttl=5, wait=5)
    async def awork():
        return other.lock("deco-async").locked()
    assert asyncio.run(awork()) is True
    assert not other.lock("deco-async").locked()


def test_release_from_another_thread(masters, client_of):
    """As threading.Lock (and redis-py's Lock, by its token): the object
    holds the grant, any thread may release it."""
    c = client_of(masters)
    lock = c.lock("cross", ttl=10).acquire()
    tok = lock.token
    err = []

    def rel():
        try:
            lock.release()
        except Exception as e:
            err.append(e)
    th = threading.Thread(target=rel)
    th.start()
    th.join(10)
    assert not err
    assert masters.holding("cross", tok) == 0 and not lock.owned()


def test_adopt(masters, client_of):
    """A lock acquired elsewhere (another process, redlock acquire) taken
    over by its token: extended to the adopter's ttl, released by it."""
    c = client_of(masters)
    other = client_of(masters)
    theirs = other.lock("adopted", ttl=2, auto_extend=False).acquire()
    tok = theirs.token
    mine = c.adopt("adopted", tok, ttl=20)
    assert mine.owned() and mine.token == tok and 10 < mine.validity <= 20
    st = c.inspect("adopted")
    assert st.holder == tok and st.ttl > 10   # extended past their 2 s
    mine.release()
    assert not c.inspect("adopted").held
    with pytest.raises(libredlock.Lost):
        c.adopt("adopted", "not-the-token", ttl=5)
    with pytest.raises(ConfigError):
        c.adopt("adopted", "__redlock__:x", ttl=5)
