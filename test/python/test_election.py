"""Elections: one leader; a standby takes over at once when the leader
resigns, and when the leader's process dies, as soon as its lock expires
(not before)."""
import os
import subprocess
import sys
import threading
import time

import pytest

from libredlock import WaitTimeout
import support

HERE = os.path.dirname(os.path.abspath(__file__))


def test_campaign_leader_resign(masters, client_of):
    a = client_of(masters)
    b = client_of(masters)
    assert a.leader("ha") is None
    ea = a.campaign("ha", id="node-a", ttl=5)
    assert ea.is_leader
    lead = b.leader("ha")
    assert lead.id == "node-a" and 0 < lead.ttl <= 5
    with pytest.raises(WaitTimeout):
        b.campaign("ha", id="node-b", ttl=5, wait=0.5)
    got = {}

    def standby():
        with b.campaign("ha", id="node-b", ttl=5, wait=30) as eb:
            got["at"] = time.monotonic()
            got["leader"] = b.leader("ha").id
            got["is_leader"] = eb.is_leader
    base = b.stats().taken
    th = threading.Thread(target=standby)
    th.start()
    # The standby is campaigning: inside the library, refused once more.
    support.wait_for(lambda: support.inside(th, "_campaign_once") and
                     b.stats().taken > base, 10, "the standby to wait")
    t0 = time.monotonic()
    ea.resign()
    assert not ea.is_leader
    th.join(30)
    assert not th.is_alive()
    assert got["leader"] == "node-b" and got["is_leader"]
    # It heard the release: far sooner than the ttl.
    assert got["at"] - t0 < 2.5


def test_failover_when_leader_dies(masters, client_of):
    """The leader is another process, killed with SIGKILL: its lock stays
    until it expires, and the standby leads right after that."""
    ttl = 2.0
    leader = support.spawn([sys.executable, os.path.join(HERE, "helper.py"),
                            "leader", ",".join(masters.addrs), "ha2",
                            "proc-a", str(ttl)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert leader.stdout.readline().strip() == "leading"
        b = client_of(masters)
        lead = b.leader("ha2")
        assert lead.id == "proc-a"
        got = {}

        def standby():
            e = b.campaign("ha2", id="proc-b", ttl=ttl, wait=30)
            got["at"] = time.monotonic()
            got["e"] = e
        th = threading.Thread(target=standby)
        th.start()
        support.wait_for(lambda: support.inside(th, "_campaign_once") and
                         b.stats().taken >= 1, 10, "the standby to wait")
        # The masters read the ttl after t_read: the lock expires at
        # t_read + ttl or later (an extension may still come before the
        # kill), never sooner.
        t_read = time.monotonic()
        lead = b.leader("ha2")
        assert lead.id == "proc-a"
        expiry = t_read + lead.ttl
        support.stop(leader)   # SIGKILL: no release
        th.join(30)
        assert not th.is_alive()
        assert got["e"].is_leader
        assert b.leader("ha2").id == "proc-b"
        # Not before the dead leader's lock expired (10 ms of slack: the
        # masters expire keys on their own clock), and soon after it
        # (after at most one more extension's worth: ttl).
        assert got["at"] >= expiry - 0.01, (got["at"], expiry)
        assert got["at"] - expiry < ttl + 3.0
        got["e"].resign()
    finally:
        support.stop(leader)


def test_deposed_when_masters_stop(masters, client_of):
    c = client_of(masters, command_timeout=0.1)
    e = c.campaign("ha3", id="x", ttl=1.5)
    assert e.is_leader and not e.deposed.is_set()
    masters[0].pause()
    masters[1].pause()
    try:
        assert e.deposed.wait(10)
        assert not e.is_leader
        assert e.deposed_reason == "EEXPIRED"
    finally:
        masters[0].resume()
        masters[1].resume()
    e.resign()
