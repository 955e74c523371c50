"""backend.py: the package's own PEP 517 build backend (issue 33).

Owns: building the wheel (libredlock/*.py, py.typed, the .dist-info with
METADATA, WHEEL, top_level.txt and RECORD) and the sdist, from
pyproject.toml's [project] table, with the standard library only. Does
not own: installing (pip does), the C library (meson installs it; the
package loads it at run time through ctypes).

Why: with setuptools as the backend, `pip install ./bindings/python`
needed setuptools (and wheel, for bdist_wheel) installed or downloadable:
it failed in a venv without them and with no package index ("invalid
command 'bdist_wheel'" with a pyenv Python), and setuptools wrote build/
and src/libredlock.egg-info into the tree. This backend has no
requirements (`requires = []`), writes only into the directory pip gives
it, and runs on every python3 >= 3.8.

Invariants: the wheel is pure Python (py3-none-any); every file in it is
listed in RECORD with its sha256; nothing is written next to the
sources. Not even this module's bytecode: pip imports it from here, and
Python would cache it in _build/__pycache__/; that name is an empty FILE
in the tree, so the cache directory cannot be made and Python skips the
write (silently: importlib ignores the OSError), on every version.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

try:
    import tomllib as _toml   # Python >= 3.11
except ImportError:   # pragma: no cover - older Pythons
    _toml = None

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(HERE, "src")
PACKAGE = "libredlock"


def _project():
    """[project]'s name, version, description, requires-python, readme
    (the fields the wheel's METADATA carries). tomllib where there is
    one; else a reader of the simple `key = "value"` lines this file
    has."""
    path = os.path.join(HERE, "pyproject.toml")
    if _toml is not None:
        with open(path, "rb") as f:
            return _toml.load(f)["project"]
    out, section = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            m = re.match(r"^\[(.+)\]$", line)
            if m:
                section = m.group(1)
                continue
            m = re.match(r'^([A-Za-z-]+)\s*=\s*"(.*)"$', line)
            if section == "project" and m:
                out[m.group(1)] = m.group(2)
    return out


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}",
             f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}"]
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    lines.append("License: MIT")
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(HERE, p.get("readme", "README.md")),
              encoding="utf-8") as f:
        readme = f.read()
    return p, ("\n".join(lines) + "\n\n" + readme).encode("utf-8")


def _files():
    """(path in the wheel, bytes) of the package's files, sorted."""
    out = []
    pkg = os.path.join(SRC, PACKAGE)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") or name == "py.typed":
            with open(os.path.join(pkg, name), "rb") as f:
                out.append((f"{PACKAGE}/{name}", f.read()))
    return out


def _digest(data):
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "sha256=" + d.rstrip(b"=").decode()


def _dist_info(p, metadata):
    name = f"{p['name']}-{p['version']}.dist-info"
    wheel = ("Wheel-Version: 1.0\nGenerator: libredlock-backend\n"
             "Root-Is-Purelib: true\nTag: py3-none-any\n").encode()
    return name, [(f"{name}/METADATA", metadata),
                  (f"{name}/WHEEL", wheel),
                  (f"{name}/top_level.txt", f"{PACKAGE}\n".encode())]


# --- PEP 517 hooks -------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory,
                                     config_settings=None):
    p, metadata = _metadata()
    name, files = _dist_info(p, metadata)
    for path, data in files:
        full = os.path.join(metadata_directory, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    return name


def _write_wheel(wheel_directory, files, p, metadata):
    name, info = _dist_info(p, metadata)
    files = files + info
    record = [f"{path},{_digest(data)},{len(data)}" for path, data in files]
    record.append(f"{name}/RECORD,,")
    files.append((f"{name}/RECORD", ("\n".join(record) + "\n").encode()))
    wheel = f"{p['name']}-{p['version']}-py3-none-any.whl"
    # A fixed date (the ZIP format's first): the same sources give the
    # same wheel.
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            zi = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return wheel


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    p, metadata = _metadata()
    return _write_wheel(wheel_directory, _files(), p, metadata)


def build_editable(wheel_directory, config_settings=None,
                   metadata_directory=None):
    """PEP 660: a wheel whose .pth puts src/ on sys.path."""
    p, metadata = _metadata()
    pth = (SRC + "\n").encode()
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth",
                                           pth)], p, metadata)


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{p['name']}-{p['version']}"
    out = os.path.join(sdist_directory, base + ".tar.gz")
    _, metadata = _metadata()
    with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(rel, data):
            ti = tarfile.TarInfo(f"{base}/{rel}")
            ti.size = len(data)
            ti.mtime = int(time.time())
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))
        for rel in ("pyproject.toml", "README.md", "_build/backend.py"):
            with open(os.path.join(HERE, rel), "rb") as f:
                add(rel, f.read())
        for path, data in _files():
            add(f"src/{path}", data)
        add("PKG-INFO", metadata)
    return base + ".tar.gz"
