"""The ctypes structs match include/redlock.h: every size and field
offset, compiled from the header by the C compiler."""
import os
import re
import shutil
import subprocess

from libredlock import _ffi


def test_structs_match_header(tmp_path):
    src = os.environ.get("REDLOCK_SRC")
    assert src, "run.sh sets REDLOCK_SRC"
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed for this check"
    lines = ["#include <stddef.h>", "#include <stdio.h>",
             '#include "redlock.h"', "int main(void) {"]
    for cname, st in _ffi.STRUCTS.items():
        lines.append(f'  printf("{cname} %zu\\n", sizeof({cname}));')
        for field, _ in st._fields_:
            lines.append(f'  printf("{cname}.{field} %zu\\n", '
                         f"offsetof({cname}, {field}));")
    lines += ["  return 0;", "}"]
    c = tmp_path / "abi.c"
    c.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "abi"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(src, "include"),
                    str(c), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True,
                         check=True).stdout
    want = dict(line.rsplit(" ", 1) for line in out.splitlines())
    have = {}
    for cname, st in _ffi.STRUCTS.items():
        have[cname] = str(ctypes_sizeof(st))
        for field, _ in st._fields_:
            have[f"{cname}.{field}"] = str(getattr(st, field).offset)
    assert have == want
    # The error codes agree with the header's map.
    header = open(os.path.join(src, "include", "redlock.h")).read()
    for val, name in _ffi.ERRORS.items():
        assert re.search(rf"XX\({name},\s*{val},", header), name


def ctypes_sizeof(st):
    import ctypes
    return ctypes.sizeof(st)
