"""The C library through ctypes: where it is found, its structs, and the
prototypes of the blocking API (include/redlock.h, "Blocking API").

Nothing here is public. The structs mirror redlock.h field by field; the
test suite compiles a small C program against the header and compares
every size and offset (test/python/test_abi.py), so a change to the header
that is not made here fails the tests instead of corrupting memory.

ctypes.CDLL releases the GIL around every foreign call, so a thread that
waits in the library (an acquisition with a wait, a campaign) lets every
other Python thread run.
"""
import ctypes
import ctypes.util
import os
import shutil
import subprocess
import threading
from typing import Any, List, Optional, Tuple

__all__ = ["lib", "library_path", "LibraryNotFound"]


class LibraryNotFound(ImportError):
    """libredlock.so could not be found or loaded (or is too old)."""


# --- structs (redlock.h) ---------------------------------------------------

c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_int64 = ctypes.c_int64
c_uint64 = ctypes.c_uint64
c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p

HIST_BUCKETS = 64
MAX_SERVERS = 64

WARNING_CB = ctypes.CFUNCTYPE(None, c_void_p, c_char_p, c_void_p)
# void (*)(redlock_lock_t *lock, int reason, void *arg)
LOST_CB = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p)
# void (*)(redlock_election_t *e, redlock_election_event ev, int reason,
#          void *arg)
ELECTION_CB = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_int, c_void_p)


class ClientConfig(ctypes.Structure):
    _fields_ = [
        ("servers", ctypes.POINTER(c_char_p)),
        ("n_servers", c_size_t),
        ("quorum", c_uint),
        ("drift_factor", ctypes.c_double),
        ("connect_timeout_ms", c_int),
        ("command_timeout_ms", c_int),
        ("retry_count", c_int),
        ("retry_delay_ms", c_int),
        ("retry_jitter_ms", c_int),
        ("reconnect_min_ms", c_int),
        ("reconnect_max_ms", c_int),
        ("key_prefix", c_char_p),
        ("username", c_char_p),
        ("password", c_char_p),
        ("restart_guard_ms", c_int),
        ("tls_ca_file", c_char_p),
        ("tls_ca_dir", c_char_p),
        ("tls_cert_file", c_char_p),
        ("tls_key_file", c_char_p),
        ("tls_key_password", c_char_p),
        ("tls_server_name", c_char_p),
        ("tls_insecure", c_int),
        ("renew_batch", c_int),
        ("clock_tolerance_ms", c_int),
        ("durable", c_int),
        ("max_ttl_ms", c_int),
        ("on_warning", WARNING_CB),
        ("warning_arg", c_void_p),
    ]


class AcquireOpts(ctypes.Structure):
    _fields_ = [
        ("wait_ms", c_int),
        ("retry_count", c_int),
        ("retry_delay_ms", c_int),
        ("retry_jitter_ms", c_int),
        ("auto_extend", c_int),
        ("heal", c_int),
        ("on_lost", LOST_CB),
        ("lost_arg", c_void_p),
        ("fence", c_int),
        ("reentrant", c_int),
        ("wake", c_int),
        ("lost_margin_ms", c_int),
        ("holder", c_char_p),
    ]


class ElectionOpts(ctypes.Structure):
    _fields_ = [
        ("ttl_ms", c_int64),
        ("retry_delay_ms", c_int),
        ("step_down_ms", c_int),
        ("once", c_int),
        ("on_change", ELECTION_CB),
        ("arg", c_void_p),
    ]


class NodeResult(ctypes.Structure):
    _fields_ = [
        ("server", c_char_p),
        ("vote", c_int),
        ("error", c_int),
        ("errstr", c_char_p),
        ("latency_us", c_uint64),
        ("holder", c_char_p),
        ("pttl_ms", c_int64),
        ("guard_wait_ms", c_int64),
        ("guard_window_ms", c_int64),
        ("guard_cause", c_int),
        ("rw_lock", c_int),
        ("node", c_char_p),
    ]


class Result(ctypes.Structure):
    _fields_ = [
        ("status", c_int),
        ("attempts", c_uint),
        ("yes", c_uint),
        ("no", c_uint),
        ("err", c_uint),
        ("n_nodes", c_uint),
        ("validity_ms", c_int64),
        ("elapsed_us", c_uint64),
        ("nodes", ctypes.POINTER(NodeResult)),
        ("quorum", c_uint),
    ]


# The counters a master's stats and a node's share, in the header's order
# (laid out inline in both structs, not as a nested one).
_NODE_COUNTERS = [("up", c_int)] + [
    (name, c_uint64)
    for name in ("commands", "replies", "server_errors", "timeouts",
                 "conn_failures", "connects", "guard_refusals",
                 "latency_sum_us")
]


class MasterStats(ctypes.Structure):
    _fields_ = [("server", c_char_p)] + _NODE_COUNTERS + [
        ("latency_hist", c_uint64 * HIST_BUCKETS),
        ("moved", c_uint64),
        ("asked", c_uint64),
        ("primaries", c_uint),
    ]


MAX_NODES = 256


class NodeStats(ctypes.Structure):
    _fields_ = [("node", c_char_p), ("master", c_uint)] + _NODE_COUNTERS


class Stats(ctypes.Structure):
    _fields_ = [
        ("attempts", c_uint64),
        ("grants", c_uint64),
        ("taken", c_uint64),
        ("noquorum", c_uint64),
        ("expired", c_uint64),
        ("acquire_timeouts", c_uint64),
        ("canceled", c_uint64),
        ("extensions", c_uint64),
        ("extension_failures", c_uint64),
        ("lost", c_uint64),
        ("releases", c_uint64),
        ("quorum", c_uint),
        ("n_masters", c_uint),
        ("masters", MasterStats * MAX_SERVERS),
        ("n_nodes", c_uint),
        ("nodes", NodeStats * MAX_NODES),
    ]


class SyncEvent(ctypes.Structure):
    _fields_ = [
        ("kind", c_int),
        ("event", c_int),
        ("reason", c_int),
        ("arg", c_void_p),
        ("text", ctypes.c_char * 512),
    ]


class PermitInfo(ctypes.Structure):
    _fields_ = [
        ("index", c_uint),
        ("holder", c_char_p),
        ("masters", c_uint),
        ("held", c_int),
        ("pttl_ms", c_int64),
    ]


class SemaphoreInfo(ctypes.Structure):
    _fields_ = [
        ("limit", c_uint),
        ("limit_max", c_uint),
        ("held", c_uint),
        ("free", c_uint),
        ("n_permits", c_uint),
        ("permits", ctypes.POINTER(PermitInfo)),
    ]


# redlock_sync_event_kind
EV_LOST, EV_ELECTION, EV_WARNING, EV_DROPPED = 1, 2, 3, 4

# Every struct the binding passes, for the ABI test.
STRUCTS = {
    "redlock_client_config": ClientConfig,
    "redlock_acquire_opts": AcquireOpts,
    "redlock_election_opts": ElectionOpts,
    "redlock_node_result": NodeResult,
    "redlock_result": Result,
    "redlock_master_stats": MasterStats,
    "redlock_node_stats": NodeStats,
    "redlock_stats": Stats,
    "redlock_sync_event": SyncEvent,
    "redlock_permit_info": PermitInfo,
    "redlock_semaphore_info": SemaphoreInfo,
}

# Error codes (REDLOCK_ERRNO_MAP): values never change.
ERRORS = {
    -1: "EINVAL", -2: "ENOMEM", -3: "ETAKEN", -4: "ENOQUORUM",
    -5: "EEXPIRED", -6: "ETIMEDOUT", -7: "ENOTHELD", -8: "ELOST",
    -9: "ECANCELED", -10: "EBUSY", -11: "EPROTO", -12: "EIO",
    -13: "ESERVER", -14: "ERESTARTED", -15: "ELIMIT",
}
EINVAL, ETAKEN, ENOQUORUM, EEXPIRED = -1, -3, -4, -5
ETIMEDOUT, ENOTHELD, ELOST, ECANCELED = -6, -7, -8, -9
ELIMIT = -15

READ, WRITE = ord("R"), ord("W")
ELECTED, DEPOSED = 1, 2

# Prototypes: (name, restype, argtypes).
P = ctypes.POINTER
_PROTOTYPES = [
    ("redlock_version_string", c_char_p, []),
    ("redlock_abi_sizeof", c_size_t, [c_char_p]),
    ("redlock_strerror", c_char_p, [c_int]),
    ("redlock_err_name", c_char_p, [c_int]),
    ("redlock_last_error", c_char_p, []),
    ("redlock_sync_new", c_int, [P(ClientConfig), P(c_void_p)]),
    ("redlock_sync_shutdown", c_int, [c_void_p]),
    ("redlock_sync_close", c_int, [c_void_p]),
    ("redlock_sync_last_result", P(Result), []),
    ("redlock_sync_stats", c_int, [c_void_p, P(Stats)]),
    ("redlock_sync_acquire", c_int,
     [c_void_p, c_char_p, c_size_t, c_int64, P(AcquireOpts), P(c_void_p)]),
    ("redlock_sync_acquire_multi", c_int,
     [c_void_p, P(c_char_p), P(c_size_t), c_size_t, c_int64,
      P(AcquireOpts), P(c_void_p)]),
    ("redlock_sync_acquire_rw", c_int,
     [c_void_p, c_char_p, c_size_t, c_int, c_int64, P(AcquireOpts),
      P(c_void_p)]),
    ("redlock_sync_acquire_sem", c_int,
     [c_void_p, c_char_p, c_size_t, c_uint, c_int64, P(AcquireOpts),
      P(c_void_p)]),
    ("redlock_sync_permit", c_int, [c_void_p]),
    ("redlock_sync_semaphore_inspect", c_int,
     [c_void_p, c_char_p, c_size_t, c_uint, P(P(SemaphoreInfo))]),
    ("redlock_sync_semaphore_set_limit", c_int,
     [c_void_p, c_char_p, c_size_t, c_uint]),
    ("redlock_sync_semaphore_force_release", c_int,
     [c_void_p, c_char_p, c_size_t, c_uint, c_uint]),
    ("redlock_sync_inspect", c_int,
     [c_void_p, c_char_p, c_size_t, P(P(Result))]),
    ("redlock_sync_force_release", c_int, [c_void_p, c_char_p, c_size_t]),
    ("redlock_sync_adopt", c_int,
     [c_void_p, c_char_p, c_size_t, c_char_p, P(c_void_p)]),
    ("redlock_sync_free", None, [c_void_p]),
    ("redlock_sync_extend", c_int, [c_void_p, c_int64]),
    ("redlock_sync_release", c_int, [c_void_p]),
    ("redlock_sync_validity_ms", c_int64, [c_void_p]),
    ("redlock_sync_is_lost", c_int, [c_void_p]),
    ("redlock_sync_fence", c_uint64, [c_void_p]),
    ("redlock_sync_token", c_int, [c_void_p, c_char_p, c_size_t]),
    ("redlock_sync_campaign", c_int,
     [c_void_p, c_char_p, c_size_t, c_char_p, P(ElectionOpts), c_int,
      P(c_void_p)]),
    ("redlock_sync_is_leader", c_int, [c_void_p]),
    ("redlock_sync_resign", c_int, [c_void_p]),
    ("redlock_sync_leader", c_int,
     [c_void_p, c_char_p, c_size_t, c_char_p, c_size_t, P(c_int64)]),
    ("redlock_sync_next_event", c_int, [P(SyncEvent), c_int]),
    ("redlock_sync_cancel", c_int, [c_void_p, c_void_p]),
    # The callbacks that queue instead of calling back (their addresses
    # only: they are never called from Python).
    ("redlock_sync_queue_lost", None, [c_void_p, c_int, c_void_p]),
    ("redlock_sync_queue_election", None, [c_void_p, c_int, c_int, c_void_p]),
    ("redlock_sync_queue_warning", None, [c_void_p, c_char_p, c_void_p]),
    ("redlock_hist_quantile_us", c_uint64, [P(c_uint64), ctypes.c_double]),
    ("redlock_stats_prometheus", c_int, [P(Stats), c_char_p, c_size_t]),
]


# --- finding the library ---------------------------------------------------

SONAMES = ("libredlock.so.0", "libredlock.so")


def _pkg_config_libdir() -> Optional[str]:
    """libdir of redlock.pc (meson install writes it), or None."""
    exe = shutil.which("pkg-config") or shutil.which("pkgconf")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--variable=libdir", "redlock"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = out.stdout.strip()
    return libdir if out.returncode == 0 and libdir else None


def candidates() -> List[Tuple[str, str]]:
    """Where the library is looked for, in order: (how, path or name).

    1. REDLOCK_LIBRARY: a path to the .so (when set, the only candidate:
       a wrong path is an error, not a reason to pick another library);
    2. pkg-config's libdir for redlock (meson install's prefix, also one
       outside the linker's path, given PKG_CONFIG_PATH);
    3. ctypes.util.find_library("redlock") (the linker's cache);
    4. the soname, for the dynamic linker itself (LD_LIBRARY_PATH).
    """
    env = os.environ.get("REDLOCK_LIBRARY")
    if env:
        return [("REDLOCK_LIBRARY", env)]
    out: List[Tuple[str, str]] = []
    libdir = _pkg_config_libdir()
    if libdir:
        for name in SONAMES:
            path = os.path.join(libdir, name)
            if os.path.exists(path):
                out.append(("pkg-config", path))
                break
    found = ctypes.util.find_library("redlock")
    if found:
        out.append(("find_library", found))
    out.append(("soname", SONAMES[0]))
    return out


class _Lib:
    """The loaded library, loaded on first use (importing the package
    needs no library: the exceptions and docs are usable without it)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._dll: Any = None
        self.path: Optional[str] = None

    def load(self) -> Any:
        if self._dll is not None:
            return self._dll
        with self._mutex:
            if self._dll is None:
                self._dll, self.path = _load()
        return self._dll

    def __getattr__(self, name: str) -> Any:
        return getattr(self.load(), name)


def _load() -> Tuple[Any, str]:
    tried: List[str] = []
    for how, where in candidates():
        try:
            dll = ctypes.CDLL(where)
        except OSError as e:
            tried.append(f"{how}: {where}: {e}")
            continue
        missing = [n for n, _, _ in _PROTOTYPES if not hasattr(dll, n)]
        if missing:
            tried.append(f"{how}: {where}: too old a libredlock (no "
                         f"{', '.join(missing)})")
            if how == "REDLOCK_LIBRARY":
                break
            continue
        for name, res, args in _PROTOTYPES:
            fn = getattr(dll, name)
            fn.restype = res
            fn.argtypes = args
        # The structs as the library has them: a field added or removed
        # would have ctypes read and write past their ends.
        differ = [f"{n} is {dll.redlock_abi_sizeof(n.encode())} bytes "
                  f"there, {ctypes.sizeof(st)} here"
                  for n, st in STRUCTS.items()
                  if dll.redlock_abi_sizeof(n.encode()) != ctypes.sizeof(st)]
        if differ:
            tried.append(f"{how}: {where}: its structs differ from this "
                         "package's (a libredlock of another version: "
                         "install the package from the same tree as the "
                         "library): " + "; ".join(differ))
            if how == "REDLOCK_LIBRARY":
                break
            continue
        return dll, where
    raise LibraryNotFound(
        "libredlock.so not found or not usable; install the C library "
        "(meson install, see the README) or set REDLOCK_LIBRARY to its "
        "path. Tried:\n  " + "\n  ".join(tried))


lib = _Lib()


def library_path() -> Optional[str]:
    """The path (or name) the C library was loaded from; loads it."""
    lib.load()
    return lib.path
