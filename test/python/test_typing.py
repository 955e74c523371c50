"""The package is typed (issue 33): mypy --strict passes over it as
installed (py.typed ships), and over a user's program that uses the
public API (Debian's python3-mypy: tools/quickstart.sh installs it)."""
import os
import subprocess
import sys

import pytest

import libredlock

USER = '''
import asyncio
from typing import Optional

import libredlock


def main() -> Optional[str]:
    with libredlock.Client(["127.0.0.1:1"], command_timeout=0.05) as c:
        lock = c.lock("job", ttl=30, wait=-1)
        got = lock.acquire(blocking=False)
        if got is not False:
            got.release()
        with c.lock("job") as held:
            token: Optional[str] = held.token
            assert held.owned() and held.validity > 0.0
        st: libredlock.LockStatus = c.inspect("job")
        e: libredlock.Election = c.campaign("lead", "me", ttl=5, wait=1)
        e.resign()

        @c.synchronize("job", ttl=5)
        def work(x: int) -> int:
            return x * 2
        n: int = work(2)

        async def amain() -> None:
            async with c.lock("job"):
                pass
        asyncio.run(amain())
        try:
            c.lock("job", wait=1).acquire()
        except TimeoutError:
            pass
        return token if st.held and n == 4 else None
'''


def test_mypy_strict(workdir):
    r = subprocess.run([sys.executable, "-c", "import mypy"],
                       capture_output=True)
    if r.returncode != 0:
        pytest.fail("mypy is not installed (apt-get install python3-mypy; "
                    "tools/quickstart.sh test does)")
    user = os.path.join(workdir, "user.py")
    with open(user, "w") as f:
        f.write(USER)
    pkg = os.path.dirname(libredlock.__file__)
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    for target in (["-p", "libredlock"], [user]):
        r = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
             "--cache-dir", os.path.join(workdir, "cache")] + target,
            capture_output=True, text=True, cwd=workdir, timeout=600)
        assert r.returncode == 0, (target, r.stdout[-4000:], r.stderr[-2000:])
