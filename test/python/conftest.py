"""Fixtures: private masters per test (killed by PID in every exit path),
a temp dir under $TMPDIR, and the paths of the build (the CLI, the header,
the library) that run.sh passes in the environment."""
import faulthandler
import os
import sys
import tempfile

import pytest

import support

# One test may take this long (the mixed fleet: FLEET_SECONDS + startup);
# past it the process prints every thread's stack and exits, so a
# deadlock (a call that never returns) fails the suite at once, with the
# place, instead of hanging until meson's timeout.
TEST_DEADLINE = float(os.environ.get("TEST_DEADLINE", "150"))
# pytest captures fds 1 and 2 during a test: run.sh keeps the real stderr
# open as fd 3 for the stacks.
try:
    _STACKS = os.fdopen(3, "w")
except OSError:
    _STACKS = sys.__stderr__


@pytest.fixture(autouse=True)
def deadline():
    faulthandler.dump_traceback_later(TEST_DEADLINE, exit=True,
                                      file=_STACKS)
    yield
    faulthandler.cancel_dump_traceback_later()


def pytest_report_header(config):
    import libredlock
    return (f"libredlock {libredlock.__version__} from "
            f"{os.path.dirname(libredlock.__file__)}; C library "
            f"{libredlock.library_path()}")


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="redlock-py-")
    yield d
    import shutil
    shutil.rmtree(d, ignore_errors=True)


def _masters(workdir, n, **kw):
    ms = support.Masters(n, workdir, **kw)
    return ms


@pytest.fixture
def masters(workdir):
    """Three masters without persistence (clients use restart_guard=-1:
    they are brand new)."""
    ms = _masters(workdir, 3)
    try:
        yield ms
    finally:
        ms.close()


@pytest.fixture
def masters5(workdir):
    ms = _masters(workdir, 5)
    try:
        yield ms
    finally:
        ms.close()


@pytest.fixture
def make_masters(workdir):
    """make_masters(n, durable=..., password=...) for other shapes."""
    made = []

    def make(n, **kw):
        ms = _masters(workdir, n, **kw)
        made.append(ms)
        return ms
    try:
        yield make
    finally:
        for ms in made:
            ms.close()


@pytest.fixture
def client_of():
    """client_of(masters, **options): a Client for brand-new masters
    (restart guard off, generous timeouts for a loaded CI machine),
    connected to every master (wait_up=False: not waited for), closed at
    the end of the test."""
    import libredlock
    made = []

    def make(ms, wait_up=True, **kw):
        kw.setdefault("restart_guard", -1)
        kw.setdefault("command_timeout", 0.5)
        kw.setdefault("connect_timeout", 1.0)
        c = libredlock.Client(ms.addrs if hasattr(ms, "addrs") else ms, **kw)
        made.append(c)
        if wait_up:   # connected to every master (as the C tests' tu_client)
            support.wait_for(lambda: all(m.up for m in c.stats().masters),
                             10, "the client to connect to every master")
        return c
    try:
        yield make
    finally:
        for c in made:
            c.close()


@pytest.fixture
def cli():
    """The redlock CLI of the build under test."""
    path = os.environ.get("REDLOCK_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("REDLOCK_CLI must name the build's redlock tool "
                    "(run.sh sets it)")
    return path
