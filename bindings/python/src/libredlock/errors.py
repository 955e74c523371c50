"""Exceptions, each with the per-master explanation of the operation.

Every exception the library raises for an operation that reached the
masters is a :class:`RedlockError` carrying:

* ``str(exc)``: why, in words, as ``redlock_result_explain()`` and the CLI
  say it ("held by another owner on at least 2 of 3 masters (quorum 2)");
* ``exc.code``: the C library's symbolic error ("ETAKEN", "ENOQUORUM"...);
* ``exc.results``: one :class:`MasterResult` per master (its vote, its own
  error text, its latency, the restart guard's wait), empty when the call
  never reached the masters (bad arguments, a closed client).
"""
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

__all__ = [
    "RedlockError", "LockTaken", "NoQuorum", "WaitTimeout", "Lost",
    "ConfigError", "LimitMismatch", "AuthenticationError", "ClientClosed",
    "MasterResult",
]

_VOTES = {0: None, 1: "yes", 2: "no", 3: "error"}
_GUARD = {0: None, 1: "restart", 2: "clock-step", 3: "clock-skew",
          4: "clock-unknown", 5: "record", 6: "reading"}


@dataclass(frozen=True)
class MasterResult:
    """What one master said in the operation.

    vote: "yes", "no" (held by another owner / not ours there), "error", or
    None (not asked, or no answer before the decision).
    error: the C error name for this master ("EIO", "ETIMEDOUT",
    "ESERVER", "ERESTARTED"...) or None.
    detail: the master's own error text (server reply, connection error),
    or "".
    latency: seconds from send to reply, None without a reply.
    guard_wait: seconds until the restart guard counts this master's votes
    again (error "ERESTARTED"), else None; guard_cause says why
    ("restart", "clock-step", ...).
    """
    server: str
    vote: Optional[str]
    error: Optional[str]
    detail: str
    latency: Optional[float]
    guard_wait: Optional[float] = None
    guard_cause: Optional[str] = None


class RedlockError(Exception):
    """Base of every error of this package."""

    def __init__(self, message: str, code: str = "",
                 results: Tuple[MasterResult, ...] = ()):
        super().__init__(message)
        self.code = code
        self.results = tuple(results)


class LockTaken(RedlockError):
    """Another owner holds the lock on enough masters that a quorum was
    impossible (ETAKEN)."""


class NoQuorum(RedlockError):
    """Too few masters answered yes: down, slow, inside the restart guard's
    window (ENOQUORUM), or a quorum came too late to leave any validity
    (EEXPIRED)."""


class WaitTimeout(RedlockError, TimeoutError):
    """The wait deadline passed before the lock (or the leadership) was
    granted (ETIMEDOUT); ``results`` shows the last attempt's votes. A
    :class:`TimeoutError`, as ``except TimeoutError`` code expects."""


class Lost(RedlockError):
    """The lock was lost while held: an extension found it gone or someone
    else's, or could not be made before its validity ran out (ELOST,
    ENOTHELD). Work done under it may not have been exclusive."""


class ConfigError(RedlockError, ValueError):
    """A bad argument or configuration: a server address that cannot be
    parsed, a ttl out of range, fencing on a read-write lock (EINVAL)."""


class LimitMismatch(ConfigError):
    """A semaphore acquired with another limit than the one its masters
    hold (ELIMIT); the message names both ("2 on this master, 3 asked").
    Change the limit with ``Client.semaphore_set_limit``, not by using
    another one."""


class AuthenticationError(NoQuorum, PermissionError):
    """Masters that refuse this client's credentials (WRONGPASS, NOAUTH,
    NOPERM: a wrong password or user) leave fewer than a quorum: raised
    after the first attempt that shows it, not after the whole wait
    (code "EAUTH"; the CLI exits 77). A NoQuorum (too few masters said
    yes) and a PermissionError; ``results`` names each master's
    refusal."""


class ClientClosed(RedlockError, RuntimeError):
    """The client is closed (or was closed while the call waited)."""


def _node(n: Any, decode: Callable[[Optional[bytes]], str]) -> MasterResult:
    lat = n.latency_us / 1e6 if n.latency_us else None
    gw = n.guard_wait_ms / 1e3 if n.error == -14 and n.guard_wait_ms >= 0 \
        else None
    from ._ffi import ERRORS
    return MasterResult(
        server=decode(n.server), vote=_VOTES.get(n.vote),
        error=ERRORS.get(n.error) if n.error else None,
        detail=decode(n.errstr), latency=lat, guard_wait=gw,
        guard_cause=_GUARD.get(n.guard_cause) if n.error == -14 else None)


def results_from(res_ptr: Any) -> Tuple[MasterResult, ...]:
    """Copies a redlock_result (a ctypes pointer, maybe NULL)."""
    if not res_ptr:
        return ()
    res = res_ptr.contents

    def decode(b: Optional[bytes]) -> str:
        return b.decode("utf-8", "replace") if b else ""
    return tuple(_node(res.nodes[i], decode) for i in range(res.n_nodes))
