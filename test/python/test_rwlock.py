"""Read-write locks: readers share, a writer excludes everyone; the plain
lock of the same name and the read-write lock exclude each other."""
import threading
import time

import pytest

from libredlock import LockTaken


def test_readers_share_writer_excludes(masters, client_of):
    a = client_of(masters)
    b = client_of(masters)
    r1 = a.rwlock("doc").read(ttl=10).acquire()
    r2 = b.rwlock("doc").read(ttl=10, wait=0).acquire()   # shared
    with pytest.raises(LockTaken):
        b.rwlock("doc").write(ttl=10, wait=0).acquire()
    r1.release()
    with pytest.raises(LockTaken):
        a.rwlock("doc").write(ttl=10, wait=0).acquire()   # r2 still reads
    r2.release()
    with a.rwlock("doc").write(ttl=10, wait=0) as w:
        assert "write" in repr(w)
        with pytest.raises(LockTaken):
            b.rwlock("doc").read(ttl=10, wait=0).acquire()
        with pytest.raises(LockTaken):
            b.rwlock("doc").write(ttl=10, wait=0).acquire()
    # The plain lock of the same name is excluded, and excludes (issue 29,
    # item 5: the modes of one name exclude each other).
    with a.rwlock("doc").read(ttl=10):
        with pytest.raises(LockTaken):
            b.lock("doc", ttl=10, wait=0).acquire()
    with a.lock("doc", ttl=10, wait=0):
        with pytest.raises(LockTaken):
            b.rwlock("doc").read(ttl=10, wait=0).acquire()
        with pytest.raises(LockTaken):
            b.rwlock("doc").write(ttl=10, wait=0).acquire()
    with b.lock("doc", ttl=10, wait=0):   # free again
        pass


def test_rw_exclusion_under_threads(masters, client_of):
    """4 readers and 2 writers on one client, 8 rounds each: a writer
    never sees anyone else inside, a reader never sees a writer."""
    c = client_of(masters, retry_delay=0.01, retry_jitter=0.005)
    state = {"readers": 0, "writers": 0, "bad": [], "max_readers": 0}
    mu = threading.Lock()
    rw = c.rwlock("doc-threads")

    def reader():
        for _ in range(8):
            with rw.read(ttl=10, wait=60):
                with mu:
                    state["readers"] += 1
                    state["max_readers"] = max(state["max_readers"],
                                               state["readers"])
                    if state["writers"]:
                        state["bad"].append("reader saw a writer")
                time.sleep(0.003)
                with mu:
                    state["readers"] -= 1

    def writer():
        for _ in range(8):
            with rw.write(ttl=10, wait=60):
                with mu:
                    state["writers"] += 1
                    if state["writers"] != 1 or state["readers"]:
                        state["bad"].append("writer not alone")
                time.sleep(0.003)
                with mu:
                    state["writers"] -= 1

    ths = [threading.Thread(target=reader) for _ in range(4)] + \
          [threading.Thread(target=writer) for _ in range(2)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(120)
    assert not any(t.is_alive() for t in ths), "deadlock"
    assert state["bad"] == []
