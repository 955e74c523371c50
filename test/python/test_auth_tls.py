"""Credentials and TLS through the Client's options."""
import os

import pytest

import libredlock
from libredlock import NoQuorum
import support


def test_password(make_masters, client_of):
    ms = make_masters(3, password="s3cret")
    with client_of(ms, password="s3cret").lock("auth", ttl=5) as lock:
        assert lock.held
    # In the URI instead.
    uris = [f"redis://:s3cret@{m.addr}" for m in ms]
    with client_of(uris).lock("auth2", ttl=5) as lock:
        assert lock.held
    bad = client_of(ms, password="wrong", wait_up=False)
    with pytest.raises(NoQuorum) as ei:
        bad.lock("auth3", ttl=5, wait=0).acquire()
    assert "credentials" in str(ei.value) or "auth" in str(ei.value)
    # Decided once a quorum was impossible: at least 2 of 3 refused us.
    assert sum(r.error is not None for r in ei.value.results) >= 2
    assert "s3cret" not in str(ei.value) and "wrong" not in str(ei.value)


def test_tls(workdir, make_masters, client_of):
    certs = os.path.join(workdir, "certs")
    os.makedirs(certs)
    support.make_certs(certs)
    ms = make_masters(3, tls=certs)
    ca = os.path.join(certs, "ca.crt")
    c = client_of(ms, tls=libredlock.TLS(ca_file=ca))
    with c.lock("tls", ttl=5) as lock:
        assert lock.held
    # Bare host:port entries become rediss:// with tls set (a dict too).
    bare = [m.addr[len("rediss://"):] for m in ms]
    with client_of(bare, tls={"ca_file": ca}).lock("tls2", ttl=5):
        pass
    # The wrong CA: every master refused, with OpenSSL's reason.
    wrong = client_of(ms, tls={"ca_file": os.path.join(certs,
                                                       "other-ca.crt")},
                      wait_up=False)
    with pytest.raises(NoQuorum) as ei:
        wrong.lock("tls3", ttl=5, wait=0).acquire()
    assert any("certificate" in r.detail for r in ei.value.results), \
        ei.value.results
