"""Closing: calls waiting in other threads end with ClientClosed at once;
held locks are released on the masters (not left to expire); a process
that exits holding a lock releases it (atexit); a forked child refuses
its parent's client."""
import os
import subprocess
import sys
import threading
import time

from libredlock import ClientClosed
import support

HERE = os.path.dirname(os.path.abspath(__file__))


def test_close_ends_waiting_calls(masters, client_of):
    other = client_of(masters)
    c = client_of(masters)
    # (Kept in variables: a held Lock that is garbage collected is
    # released.)
    held = other.lock("cl-held", ttl=60).acquire()
    lead = other.campaign("cl-lead", id="other")
    mine = c.lock("cl-mine", ttl=60).acquire()
    tok = mine.token
    support.wait_for(lambda: masters.holding("cl-mine", tok) == 3, 5,
                     "the key everywhere")
    ended = {}

    def run(name, fn):
        try:
            fn()
            ended[name] = ("returned", time.monotonic())
        except ClientClosed:
            ended[name] = ("closed", time.monotonic())
        except Exception as e:
            ended[name] = (repr(e), time.monotonic())

    ths = [threading.Thread(target=run, args=(
               "acquire", lambda: c.lock("cl-held", ttl=5, wait=60).acquire())),
           threading.Thread(target=run, args=(
               "campaign", lambda: c.campaign("cl-lead", id="me")))]
    for t in ths:
        t.start()
    # Both threads inside the library (their innermost frames are the
    # calls), and refused by the masters at least twice between them.
    support.wait_for(lambda: support.inside(ths[0], "_acquire_once") and
                     support.inside(ths[1], "_campaign_once") and
                     c.stats().taken >= 2,
                     10, "both calls to be refused and waiting")
    t0 = time.monotonic()
    c.close()
    for t in ths:
        t.join(10)
    assert not any(t.is_alive() for t in ths)
    assert ended["acquire"][0] == "closed"
    assert ended["campaign"][0] == "closed"
    assert ended["acquire"][1] - t0 < 5 and ended["campaign"][1] - t0 < 5
    # The held lock went with the close, not with its 60 s ttl.
    assert masters.holding("cl-mine", tok) == 0
    assert held.held and lead.is_leader   # the other client's, untouched


def test_exit_releases_held_locks(masters):
    """A program that ends holding a lock (no release, no close) releases
    it at exit: the key is gone right away, not after its 60 s ttl."""
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "helper.py"), "hold",
         ",".join(masters.addrs), "cl-exit", "60"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    tok = out.stdout.strip()
    assert len(tok) == 40
    assert masters.holding("cl-exit", tok) == 0


def test_forked_child_refuses_parent_client(masters, client_of):
    c = client_of(masters)
    with c.lock("cl-fork", ttl=10):
        pid = os.fork()
        if pid == 0:   # the child: no background thread here
            code = 3
            try:
                c.lock("cl-fork-2", ttl=5).acquire()
                code = 1
            except ClientClosed as e:
                code = 0 if "fork" in str(e) else 2
            except BaseException:
                code = 4
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        # The parent's client is unaffected.
        with c.lock("cl-fork-3", ttl=5):
            pass
