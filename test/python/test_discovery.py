"""Where the C library is found: REDLOCK_LIBRARY (and only it when set),
pkg-config's libdir for redlock, the linker's search path; a clear
LibraryNotFound otherwise. Each case in a fresh interpreter."""
import os
import subprocess
import sys

import pytest

LIB = os.environ.get("REDLOCK_LIBRARY", "")

PROBE = ("import libredlock\n"
         "try:\n"
         "    print(libredlock.library_path())\n"
         "except libredlock.LibraryNotFound as e:\n"
         "    print('NOTFOUND', e)\n")


def probe(env, tmp_path):
    base = {k: v for k, v in os.environ.items()
            if k not in ("REDLOCK_LIBRARY", "LD_LIBRARY_PATH",
                         "PKG_CONFIG_PATH")}
    # No system redlock.pc (an earlier `meson install` on this machine)
    # may answer for pkg-config: only the directories given here.
    empty = tmp_path / "no-pc"
    empty.mkdir(exist_ok=True)
    base["PKG_CONFIG_LIBDIR"] = str(empty)
    base.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=base,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture
def libfile():
    assert LIB and os.path.exists(LIB), "run.sh sets REDLOCK_LIBRARY"
    return os.path.realpath(LIB)


def test_redlock_library(libfile, tmp_path):
    assert probe({"REDLOCK_LIBRARY": libfile}, tmp_path) == libfile


def test_redlock_library_wrong_path_is_an_error(libfile, tmp_path):
    out = probe({"REDLOCK_LIBRARY": str(tmp_path / "nope.so"),
                 "LD_LIBRARY_PATH": os.path.dirname(libfile)}, tmp_path)
    assert out.startswith("NOTFOUND")
    assert "nope.so" in out and "REDLOCK_LIBRARY" in out


def test_too_old_a_library(tmp_path):
    """A library without the blocking API's shutdown (here: libuv) is
    refused by name, not called."""
    import ctypes.util
    uv = ctypes.util.find_library("uv")
    assert uv
    out = probe({"REDLOCK_LIBRARY": uv}, tmp_path)
    assert out.startswith("NOTFOUND") and "too old" in out


def test_pkg_config(libfile, tmp_path):
    """A prefix outside the linker's path, found through its redlock.pc
    (as `meson install --prefix P` writes it; PKG_CONFIG_PATH names it)."""
    prefix = tmp_path / "prefix"
    libdir = prefix / "lib"
    pcdir = libdir / "pkgconfig"
    pcdir.mkdir(parents=True)
    os.symlink(libfile, libdir / "libredlock.so.0")
    (pcdir / "redlock.pc").write_text(
        f"prefix={prefix}\nlibdir=${{prefix}}/lib\n"
        f"includedir=${{prefix}}/include\n\n"
        "Name: redlock\nDescription: test\nVersion: 0.1.0\n"
        "Libs: -L${libdir} -lredlock\nCflags: -I${includedir}\n")
    out = probe({"PKG_CONFIG_PATH": str(pcdir)}, tmp_path)
    assert out == str(libdir / "libredlock.so.0")


def test_linker_path(libfile, tmp_path):
    """Neither REDLOCK_LIBRARY nor pkg-config: the soname through the
    dynamic linker (LD_LIBRARY_PATH here; ldconfig's cache for /usr)."""
    out = probe({"LD_LIBRARY_PATH": os.path.dirname(libfile)}, tmp_path)
    assert not out.startswith("NOTFOUND"), out
    assert "libredlock.so" in out


def test_not_found_says_what_to_do(tmp_path):
    out = probe({"LD_LIBRARY_PATH": str(tmp_path)}, tmp_path)
    if not out.startswith("NOTFOUND"):
        pytest.fail("this machine has libredlock installed system-wide "
                    f"({out}): the not-found message cannot be checked")
    assert "REDLOCK_LIBRARY" in out and "meson install" in out


def test_library_of_another_version_is_refused(libfile, tmp_path):
    """A library whose structs differ from the package's (here the
    package's redlock_stats has grown a field, as a newer header's would)
    is refused with the sizes named, never called with a struct of the
    wrong size (the library would write past its end)."""
    code = ("import ctypes\n"
            "from libredlock import _ffi as F\n"
            "class S(ctypes.Structure):\n"
            "    _fields_ = F.Stats._fields_ + [('x', ctypes.c_uint64)]\n"
            "F.STRUCTS['redlock_stats'] = S\n" + PROBE)
    base = dict(os.environ, REDLOCK_LIBRARY=libfile)
    out = subprocess.run([sys.executable, "-c", code], env=base,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("NOTFOUND"), out.stdout
    assert "structs differ" in out.stdout
    assert "redlock_stats is" in out.stdout
