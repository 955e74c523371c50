"""Bad input: Python exceptions with a clear message, never a crash."""
import math

import pytest

import libredlock
from libredlock import ClientClosed, ConfigError, RedlockError


@pytest.mark.parametrize("servers,err,words", [
    ([], ConfigError, "at least one master"),
    ("", ConfigError, ""),
    (["127.0.0.1:notaport"], ConfigError, "port"),
    (["redis://127.0.0.1:99999"], ConfigError, "port"),
    (["ftp://127.0.0.1:6379"], ConfigError, "ftp"),
    (["a,,b"], ConfigError, ""),
    (["127.0.0.1:6379\0x"], ConfigError, "NUL"),
    ([1234], TypeError, "str"),
    (b"127.0.0.1:6379", TypeError, "list"),
    # No servers: the CLI's REDLOCK_SERVERS (unset here: run.sh).
    (None, ConfigError, "REDLOCK_SERVERS"),
    ([f"127.0.0.1:{7000 + i}" for i in range(65)], ConfigError, "64"),
])
def test_bad_servers(servers, err, words):
    with pytest.raises(err) as ei:
        libredlock.Client(servers)
    assert words in str(ei.value)
    if err is ConfigError:
        assert isinstance(ei.value, ValueError)
        assert ei.value.code == "EINVAL"


@pytest.mark.parametrize("kw,err", [
    ({"password": 123}, TypeError),
    ({"password": "a\0b"}, ConfigError),
    ({"quorum": 7}, ConfigError),
    ({"quorum": 1}, ConfigError),   # below a majority of 3
    ({"quorum": "2"}, TypeError),
    ({"command_timeout": "fast"}, TypeError),
    ({"command_timeout": -1}, ConfigError),
    ({"command_timeout": math.nan}, ConfigError),
    ({"connect_timeout": 1e12}, ConfigError),
    ({"tls": "yes"}, TypeError),
    ({"tls": {"nonsense": 1}}, TypeError),
    ({"durable": "yes"}, TypeError),
    ({"retry_count": 1.5}, TypeError),
    ({"drift_factor": -1}, ConfigError),
])
def test_bad_options(kw, err):
    with pytest.raises(err):
        libredlock.Client(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
                          **kw)


def test_bad_lock_arguments(masters, client_of):
    c = client_of(masters)
    for bad in (None, 42, 3.5, object(), ["a", 7]):
        with pytest.raises(TypeError):
            c.lock(bad)
    for bad in ("", b"", []):
        with pytest.raises(ConfigError):
            c.lock(bad)
    with pytest.raises(TypeError):
        c.lock("x", ttl="30")
    with pytest.raises(TypeError):
        c.lock("x", ttl=True)
    for ttl in (0, -1, math.inf, math.nan, 10**10):
        with pytest.raises(ConfigError):
            c.lock("x", ttl=ttl)
    with pytest.raises(ConfigError):
        c.lock("x", wait=-2)
    with pytest.raises(TypeError):
        c.lock("x", fence="yes")
    with pytest.raises(ConfigError):
        c.lock("x", ttl=1, lost_margin=0.6)
    # Longer than the deployment's cap (1 h by default): the C library.
    with pytest.raises(ConfigError) as ei:
        c.lock("x", ttl=7200).acquire()
    assert "max" in str(ei.value) or "cap" in str(ei.value)
    # A key beyond the C limit (64 KiB).
    with pytest.raises(ConfigError):
        c.lock("k" * 70000).acquire()
    with pytest.raises(ConfigError):
        c.lock(["k"] * 65).acquire()
    with pytest.raises(TypeError):
        c.rwlock(None)
    with pytest.raises(TypeError):
        c.rwlock("d").read(heal=True)
    with pytest.raises(TypeError):
        c.campaign("e", id=None)
    with pytest.raises(ConfigError):
        c.campaign("e", id="x" * 81, wait=1)
    with pytest.raises(ConfigError):
        c.campaign("e", id="a\0b")
    with pytest.raises(TypeError):
        c.leader(5)


def test_misuse_of_locks(masters, client_of):
    c = client_of(masters)
    lock = c.lock("misuse", ttl=5)
    with pytest.raises(RedlockError) as ei:
        lock.release()
    assert ei.value.code == "ENOTHELD"
    with pytest.raises(RedlockError):
        lock.extend()
    lock.acquire()
    with pytest.raises(RedlockError) as ei:
        lock.acquire()
    assert ei.value.code == "EBUSY"
    lock.release()
    with pytest.raises(RedlockError):
        lock.release()


def test_closed_client(masters, client_of):
    c = client_of(masters)
    held = c.lock("closed-1", ttl=30).acquire()
    e = c.campaign("closed-e", id="me")
    c.close()
    c.close()   # idempotent
    assert c.closed and "closed" in repr(c)
    for call in (lambda: c.lock("closed-2").acquire(),
                 lambda: c.stats(),
                 lambda: c.leader("closed-e"),
                 lambda: c.campaign("closed-e", id="me"),
                 lambda: held.release(),
                 lambda: held.extend()):
        with pytest.raises(ClientClosed):
            call()
    assert held.validity == 0.0 and held.token is None and not held.held
    assert not e.is_leader
    e.resign()   # nothing left to resign: no error
    with pytest.raises(RuntimeError):   # ClientClosed is one
        c.lock("closed-3").acquire()


def test_unreachable_masters_explained():
    """Nothing listens there: NoQuorum, each master named with its own
    error text."""
    c = libredlock.Client(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
                          restart_guard=-1, connect_timeout=0.2)
    try:
        with pytest.raises(libredlock.NoQuorum) as ei:
            c.lock("nowhere", ttl=5, wait=0).acquire()
        e = ei.value
        assert len(e.results) == 3
        failed = [r for r in e.results if r.vote == "error"]
        assert len(failed) >= 2, e.results   # a quorum was impossible
        assert all(r.error == "EIO" and "refused" in r.detail
                   for r in failed), e.results
        assert "127.0.0.1:1" in str(e)
    finally:
        c.close()
