"""libredlock: the redlock C library's distributed locks for Python.

Mutual exclusion over N independent Redis masters (the Redlock
algorithm), with the C library's fencing tokens, restart guard,
phase-fair read-write locks, batched renewals, takeover at expiry and
elections: one implementation shared with C programs and the ``redlock``
CLI, so a mixed fleet runs one algorithm.

    import libredlock

    with libredlock.Client(["10.0.0.1:6379", "10.0.0.2:6379",
                            "10.0.0.3:6379"]) as client:
        with client.lock("job-42", ttl=30, wait=5) as lock:
            ...   # extended while the block runs; check lock.lost

The C library (libredlock.so) is loaded through ctypes: from
REDLOCK_LIBRARY, else pkg-config's libdir for redlock, else the linker's
search path. See bindings/python/README.md (the package's description).
"""
from ._ffi import LibraryNotFound, library_path
from .client import (TLS, Client, Election, HolderStatus, Leader, Lock,
                     LockStatus, MasterStats, PermitStatus, RWLock,
                     Semaphore, SemaphoreStatus, Stats, parse_duration,
                     token_holder)
from .errors import (AuthenticationError, ClientClosed, ConfigError,
                     LimitMismatch, LockTaken, Lost, MasterResult, NoQuorum,
                     RedlockError, WaitTimeout)

__version__ = "0.4.0"

__all__ = [
    "Client", "Lock", "RWLock", "Semaphore", "SemaphoreStatus",
    "PermitStatus", "LockStatus", "HolderStatus", "Election", "Leader",
    "Stats", "MasterStats", "TLS", "RedlockError", "LockTaken", "NoQuorum",
    "WaitTimeout", "Lost", "ConfigError", "LimitMismatch",
    "AuthenticationError", "ClientClosed", "MasterResult",
    "parse_duration", "token_holder",
    "LibraryNotFound", "library_path", "c_version",
]


def c_version() -> str:
    """The loaded C library's version string."""
    from ._ffi import lib
    v: bytes = lib.load().redlock_version_string()
    return v.decode()
