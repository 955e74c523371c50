"""`pip install ./bindings/python` (issue 33): in a fresh venv of every
python3 at hand (>= 3.8), with no package index and neither setuptools
nor wheel installed, writing nothing into the package's directory. The
interpreters: this one's base, `python3` on PATH, and any listed in
REDLOCK_PYTHONS (space-separated paths: e.g. pyenv's 3.8 and 3.13)."""
import os
import re
import shutil
import subprocess
import sys

import pytest


def _interpreters():
    found = {}
    cands = [os.path.join(sys.base_prefix, "bin", "python3"),
             shutil.which("python3")]
    cands += os.environ.get("REDLOCK_PYTHONS", "").split()
    for c in cands:
        if c and os.access(c, os.X_OK):
            found.setdefault(os.path.realpath(c), c)
    return sorted(found.values())


def _listing(d):
    out = set()
    for root, dirs, files in os.walk(d):
        for f in files:
            out.add(os.path.relpath(os.path.join(root, f), d))
    return out


def _project_version():
    """meson.build's version, the one every other is checked against
    (check-version): the package installed must say the same."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "meson.build")) as f:
        m = re.search(r"version\s*:\s*'([^']+)'", f.read())
    assert m, "no version in meson.build"
    return m.group(1)


def _run(argv, **kw):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(argv, capture_output=True, text=True, env=env,
                          timeout=240, **kw)


@pytest.mark.parametrize("python", _interpreters())
def test_pip_install_offline_without_setuptools(python, workdir):
    src = os.path.join(os.environ["REDLOCK_SRC"], "bindings", "python")
    pkg = os.path.join(workdir, "pkg")
    # (_build/__pycache__ is a file of the tree: copied as it is.)
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns(
        "build", "*.egg-info"))
    before = _listing(pkg)
    venv = os.path.join(workdir, "venv")
    r = _run([python, "-m", "venv", venv])
    if r.returncode != 0:
        pytest.skip(f"{python}: no venv with pip (ensurepip): "
                    f"{r.stderr[-300:]}")
    vpy = os.path.join(venv, "bin", "python")
    r = _run([vpy, "-c", "import sys; print(sys.version_info >= (3, 8))"])
    if r.stdout.strip() != "True":
        pytest.skip(f"{python} is older than 3.8")
    # Neither setuptools nor wheel: the build needs none of them.
    _run([vpy, "-m", "pip", "uninstall", "-y", "-q", "setuptools",
          "wheel"])
    r = _run([vpy, "-c", "import setuptools"])
    assert r.returncode != 0, "setuptools is still importable"
    r = _run([vpy, "-m", "pip", "install", "--no-index", "-q", pkg])
    assert r.returncode == 0, (python, r.stdout[-2000:], r.stderr[-2000:])
    r = _run([vpy, "-c", "import libredlock, os; print("
              "libredlock.__version__, os.path.exists(os.path.join("
              "os.path.dirname(libredlock.__file__), 'py.typed')))"],
             cwd=workdir)
    assert r.stdout.split() == [_project_version(), "True"], (r.stdout,
                                                             r.stderr)
    # Out of tree: nothing written next to the sources (no build/, no
    # egg-info, no bytecode).
    assert _listing(pkg) == before, sorted(_listing(pkg) - before)
