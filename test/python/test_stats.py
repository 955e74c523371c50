"""Client.stats(): counters, per-master latencies, Prometheus text."""
import pytest

from libredlock import LockTaken
from support import wait_for


def test_stats(masters, client_of):
    c = client_of(masters)
    other = client_of(masters)
    # Connections are made in the background: every master up first, so
    # that every one gets commands below.
    wait_for(lambda: all(m.up for m in c.stats().masters), 10,
             "every master up")
    for _ in range(3):
        with c.lock("st", ttl=5):
            pass
    with other.lock("st2", ttl=5):
        with pytest.raises(LockTaken):
            c.lock("st2", ttl=5, wait=0).acquire()
    # Decisions come at quorum: the last master's replies may still be on
    # their way.
    s = wait_for(lambda: (lambda s: s if all(m.replies == m.commands
                                             for m in s.masters) else None)(
        c.stats()), 10, "every master's replies")
    assert s.grants == 3 and s.releases == 3
    assert s.taken == 1 and s.attempts >= 4
    assert s.quorum == 2
    assert [m.server for m in s.masters] == masters.addrs
    assert all(m.up and m.commands > 0 and m.replies > 0 for m in s.masters), s.masters
    assert all(0 < m.latency_p50 <= m.latency_p99 < 5 for m in s.masters)
    text = s.prometheus
    assert "redlock_lock_grants_total 3" in text
    assert f'redlock_master_up{{master="{masters.addrs[0]}"}} 1' in text
    assert "redlock_master_latency_seconds_bucket" in text
    assert "grants=3" in repr(s)
