"""Fencing tokens: strictly increasing across holders, whichever client,
the C CLI included (one counter per resource on every master)."""
import subprocess

import pytest

from libredlock import ConfigError


def test_fences_increase_across_holders(make_masters, client_of, cli):
    # Durable masters (appendfsync always), declared so: the restart
    # guard lets the CLI's votes count at once on brand-new masters.
    masters = make_masters(3, durable=True)
    a = client_of(masters, durable=True)
    b = client_of(masters, durable=True)
    env = {"REDLOCK_SERVERS": ",".join(masters.addrs),
           "REDLOCK_DURABLE": "1", "PATH": "/usr/bin:/bin"}
    seen = []
    for i in range(6):
        who = a if i % 2 == 0 else b
        with who.lock("fenced", ttl=5, wait=5, fence=True) as lock:
            assert isinstance(lock.fence, int) and lock.fence > 0
            seen.append(lock.fence)
        if i % 3 == 2:
            # The C CLI takes the same counter.
            out = subprocess.run([cli, "acquire", "--fence", "--ttl", "5s",
                                  "fenced"], env=env, capture_output=True,
                                 text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            tok, fence = out.stdout.split()
            seen.append(int(fence))
            r = subprocess.run([cli, "release", "fenced", tok], env=env,
                               capture_output=True, timeout=30)
            assert r.returncode == 0
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen


def test_no_fence_unless_asked(masters, client_of):
    c = client_of(masters)
    with c.lock("unfenced", ttl=5) as lock:
        assert lock.fence is None
    assert masters[0].cmd("EXISTS", "unfenced:fence") == 0


def test_fence_refused_on_rwlock_and_multi(masters, client_of):
    c = client_of(masters)
    with pytest.raises(TypeError):
        c.rwlock("doc").write(fence=True)
    with pytest.raises(ConfigError) as ei:
        c.lock(["a", "b"], fence=True).acquire()
    assert "fenc" in str(ei.value)
