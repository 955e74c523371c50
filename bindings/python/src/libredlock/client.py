"""Client, locks, read-write locks, elections and stats over the C
library's blocking API (redlock_sync_*).

Threads: a Client is one redlock_sync_t: a background thread runs the
library's loop and every call is handed to it. Any number of Python
threads may use one Client at once; the GIL is released while a call
waits (ctypes.CDLL). asyncio code uses ``async with`` on the same objects:
the blocking calls then run on worker threads, never on the event loop.

No Python code runs on the library's thread: its lost, election and
warning callbacks are the C library's queueing ones, and a daemon thread
here (libredlock-events) sets the events. A thread that holds the GIL
delays when a loss is seen, never the loop (and every lock's extension).

Closing: ``Client.close()`` refuses new calls, sets ``lost`` of every lock
held and ``deposed`` of every election (reason ECANCELED: before the
release, so a block learns it before another client can take the lock),
ends the calls in flight in other threads (a waiting acquisition or
campaign raises ClientClosed at once), releases every lock still held,
waits until no thread is inside the library any more, and only then frees
the C handle.
"""
import asyncio
import atexit
import ctypes
import functools
import gc
import itertools
import logging
import math
import os
import queue
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence,
                    Literal, Tuple, TypeVar, Union, cast, overload)

from . import _ffi as F
from .errors import (AuthenticationError, ClientClosed, ConfigError,
                     LimitMismatch, LockTaken, Lost, MasterResult, NoQuorum,
                     RedlockError, WaitTimeout, results_from)

__all__ = ["Client", "Lock", "RWLock", "Semaphore", "SemaphoreStatus",
           "PermitStatus", "LockStatus", "HolderStatus", "Election",
           "Leader", "Stats", "MasterStats", "TLS", "parse_duration"]

log = logging.getLogger("libredlock")

Resource = Union[str, bytes, bytearray, memoryview]
_F = TypeVar("_F", bound=Callable[..., Any])
_Canceller = Callable[[Callable[[], bool]], Any]

# After fork() the child has no background threads: its copies of the
# parent's clients must not be used (nor closed: their thread is gone).
_fork_generation = 0


def _after_fork_in_child() -> None:
    global _fork_generation, _pool
    _fork_generation += 1
    # The parent's worker threads are not here: their queues would take
    # a call and never run it.
    _pool = _Pool()
    # The parent's locks stay the parent's: a block running on in the
    # child (forked inside a with) must stop, as must its leader.
    for hd in list(_open_handles):
        for h in list(hd.held.values()):
            if not h.event.is_set():
                h.reason = "ECANCELED"
                h.event.set()
        for e in list(hd.elections.values()):
            e.deposed_reason = "ECANCELED"
            e.deposed.set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# --- argument checking -------------------------------------------------------

_INT_MAX = 2**31 - 1


def _number(name: str, value: object) -> Union[int, float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not "
                        f"{type(value).__name__}")
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be finite, not {value!r}", "EINVAL")
    return value


def _ms(name: str, value: object, minimum: int = 0) -> int:
    """Seconds (int or float) to whole milliseconds, within a C int."""
    v = _number(name, value)
    ms = int(round(v * 1000))
    if v > 0 and ms == 0:
        ms = 1
    if ms < minimum or ms > _INT_MAX:
        raise ConfigError(f"{name} {value!r} s is out of range "
                          f"({minimum / 1000:g} s to {_INT_MAX / 1000:g} s)",
                          "EINVAL")
    return ms


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < -1 or value > _INT_MAX:
        raise ConfigError(f"{name} {value} out of range", "EINVAL")
    return value


_MAX_PERMITS = 1024   # REDLOCK_MAX_PERMITS


def _limit(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1 or value > _MAX_PERMITS:
        raise ConfigError(f"{name} {value} out of range (1..{_MAX_PERMITS})",
                          "EINVAL")
    return value


def _cstr(name: str, value: object) -> Optional[bytes]:
    """A str for a NUL-terminated C string (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    b = value.encode("utf-8")
    if b"\0" in b:
        raise ConfigError(f"{name} contains a NUL character", "EINVAL")
    return b


# A holder (issue 33): who holds a lock, in its value "<40 hex>.<holder>"
# (redlock_acquire_opts.holder; `redlock status` shows it).
MAX_HOLDER = 80
_HOLDER_RE = re.compile(r"\A[0-9a-f]{40}\.(.+)\Z", re.S)


def _holder(value: object) -> Optional[bytes]:
    b = _cstr("holder", value)
    if b is not None and not 1 <= len(b) <= MAX_HOLDER:
        raise ConfigError(f"holder must be 1..{MAX_HOLDER} bytes (UTF-8), "
                          f"not {len(b)}", "EINVAL")
    return b


def token_holder(value: str) -> Optional[str]:
    """The holder part of a lock's value (a token made with ``holder=``,
    or ``redlock run``/``acquire --id``, an election's identity): what
    follows "<40 lowercase hex>."; None for any other value."""
    m = _HOLDER_RE.match(value)
    return m.group(1) if m else None


def _resource(value: object) -> bytes:
    if isinstance(value, str):
        b = value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
    else:
        raise TypeError("a lock name must be str or bytes, not "
                        f"{type(value).__name__}")
    if not b:
        raise ConfigError("a lock name must not be empty", "EINVAL")
    return b


def _decode(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""


# --- errors ------------------------------------------------------------------

_CLASSES = {F.ETAKEN: LockTaken, F.ENOQUORUM: NoQuorum,
            F.EEXPIRED: NoQuorum, F.ETIMEDOUT: WaitTimeout, F.ELOST: Lost,
            F.ENOTHELD: Lost, F.EINVAL: ConfigError,
            F.ECANCELED: ClientClosed, F.ELIMIT: LimitMismatch}


def _error(f: Any, rc: int, what: Any,
           classes: Optional[Dict[int, type]] = None) -> RedlockError:
    """The exception for a failed call; reads this thread's message and
    per-master result at once (the next library call replaces them).
    `what` names the operation: a str, or (verb, object with .name),
    formatted only here (not on every successful call)."""
    # No collection between the C call and the copy: a collection may
    # close a garbage Client (its __del__), a blocking C call that
    # replaces this thread's last result, freeing the one being read
    # (a segfault in CI's Python run). gc.disable() is the process's, but
    # only for these two reads.
    collecting = gc.isenabled()
    gc.disable()
    try:
        msg = _decode(f.redlock_last_error())
        results = results_from(f.redlock_sync_last_result())
    finally:
        if collecting:
            gc.enable()
    if isinstance(what, tuple):
        what = f"{what[0]} {what[1].name!r}"
    cls: Any = (classes or {}).get(rc) or _CLASSES.get(rc, RedlockError)
    name = F.ERRORS.get(rc, str(rc))
    exc: RedlockError = cls(f"{what}: {msg}" if msg else f"{what}: {name}",
                            name, results)
    return exc


# --- the handle and its gate -------------------------------------------------

class _Handle:
    """The C redlock_sync_t. close() shuts it down: calls in flight end
    with ECANCELED and later ones get ECANCELED at once, while the handle
    stays allocated. It is freed (redlock_sync_close) only when this object
    is garbage: every call holds a reference to it (through its Client), so
    no thread can be inside the library then. Nothing counts threads in
    and out: a signal handler that runs right after a ctypes call returns
    (close() from it waited for its own thread's count) or a Ctrl-C in that
    bookkeeping (which left the count up for good) could not get it wrong.
    Holds no reference to the Client (its finalizer)."""

    __slots__ = ("f", "ptr", "gate", "closed", "gen", "held", "elections",
                 "reading", "freed", "__weakref__")

    def __init__(self, f: Any, ptr: Any) -> None:
        self.f = f
        self.ptr = ptr
        # Held through a shutdown and through stats() (whose strings the
        # shutdown frees). Reentrant: a signal handler may close() on a
        # thread inside it.
        self.gate = threading.RLock()
        # the thread inside stats(), under the gate
        self.reading: Optional[int] = None
        self.closed = False
        self.gen = _fork_generation
        self.held: "Dict[int, _Held]" = {}   # locks held now
        self.elections: "Dict[int, Election]" = {}
        # Set by the finalizer once the C handle is freed. In a garbage
        # cycle (a client kept by an object that refers to itself) the
        # collector runs that finalizer (a weakref callback) before the
        # __del__ of the Client and its Locks, which still see this
        # object: they must find the handle gone, not call into it.
        self.freed = [False]
        weakref.finalize(self, _free_handle, f, ptr, self.gen,
                         self.freed).atexit = False

    def enter(self) -> Any:
        """The C handle, for a call; raises ClientClosed once closed."""
        if self.freed[0]:
            self.closed = True
        if self.closed:
            raise ClientClosed("the client is closed", "ECANCELED")
        if self.gen != _fork_generation:
            raise ClientClosed("this client was created in the parent "
                               "process before fork(): make a new one "
                               "in the child", "ECANCELED")
        return self.ptr

    def close(self) -> None:
        if self.freed[0]:
            self.closed = True   # shut down and freed by the finalizer
            return
        if self.gen != _fork_generation:
            # A parent's client in a forked child: not ours to shut down
            # (and its gate may have been held by a parent's thread).
            self.closed = True
            return
        with self.gate:
            if self.closed:
                return
            self.closed = True
            # The shutdown releases every lock held: their holders learn
            # it first (lost, deposed), before any other client can take
            # them.
            for h in list(self.held.values()):
                h.reason = "ECANCELED"
                h.event.set()
            for e in list(self.elections.values()):
                e.deposed_reason = "ECANCELED"
                e.deposed.set()
            if self.reading == threading.get_ident():
                # A signal handler on a thread inside stats(): the strings
                # it copies would go. The shutdown runs once it is done.
                threading.Thread(target=self._shutdown, daemon=True,
                                 name="libredlock-close").start()
                return
            self._shutdown()

    def _shutdown(self) -> None:
        # Calls in flight end now (ECANCELED), held locks are released,
        # the background thread is joined; the handle stays allocated.
        # (Never on the library's thread: no Python code runs there.)
        with self.gate:
            self.f.redlock_sync_shutdown(self.ptr)
        for hid in list(self.held):
            _lost_targets.pop(hid, None)
        self.held.clear()
        for eid in list(self.elections):
            _election_targets.pop(eid, None)
        self.elections.clear()


def _free_handle(f: Any, ptr: Any, gen: int, freed: List[bool]) -> None:
    """The handle's finalizer: no thread can be in a call on it."""
    freed[0] = True   # first: nothing may call into it from now on
    if gen != _fork_generation:
        return   # the parent's: its thread is not in this process
    f.redlock_sync_shutdown(ptr)
    f.redlock_sync_close(ptr)


# Every open handle, closed at interpreter exit (before the interpreter
# finalizes: no callback may come from the library's thread after that).
_open_handles: "weakref.WeakSet[_Handle]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for hd in list(_open_handles):
        try:
            hd.close()
        except Exception:
            pass


# --- events from the library's thread ----------------------------------------
# No Python code runs on the library's loop thread: a ctypes callback takes
# the GIL, and the loop (every lock's extension with it) would wait for
# whichever thread holds it. The C library's queueing callbacks
# (redlock_sync_queue_*) are given instead; one daemon thread per process
# takes their events (redlock_sync_next_event, the GIL released while it
# waits) and sets the events here. The ids map to Python state; no
# pointer to a Python object crosses into C.

_ids = itertools.count(1)
_lost_targets: "Dict[int, _Held]" = {}
_election_targets: "Dict[int, Election]" = {}


def _c_callback(proto: Any, name: str) -> Any:
    """A pointer to the library's own function `name`, typed for a
    callback field: calling it runs C only (no GIL)."""
    f = F.lib.load()
    return proto(ctypes.cast(getattr(f, name), ctypes.c_void_p).value)


_reader_mutex = threading.Lock()
_reader_pid = None


def _start_reader() -> None:
    """The event thread of this process (again in a forked child: the
    parent's is not there)."""
    global _reader_pid
    with _reader_mutex:
        if _reader_pid == os.getpid():
            return
        threading.Thread(target=_read_events, args=(F.lib.load(),),
                         daemon=True, name="libredlock-events").start()
        _reader_pid = os.getpid()


def _read_events(f: Any) -> None:
    ev = F.SyncEvent()
    while True:
        # Without a limit: the thread is a daemon and waits in C with
        # the GIL released.
        if f.redlock_sync_next_event(ctypes.byref(ev), -1) != 0:
            continue
        try:
            _dispatch(ev.kind, ev.event, ev.reason, ev.arg, ev.text)
        except Exception:
            log.exception("libredlock event")


def _dispatch(kind: int, event: int, reason: int, arg: Any,
              text: bytes) -> None:
    if kind == F.EV_LOST:
        h = _lost_targets.get(arg)
        if h is not None and not h.event.is_set():   # the first cause
            h.reason = F.ERRORS.get(reason, str(reason))
            h.event.set()
    elif kind == F.EV_ELECTION:
        e = _election_targets.get(arg)
        # Read late, an election's event may come after its client's
        # close() set deposed: that stays set.
        if e is not None and not e._client.closed:
            if event == F.ELECTED:
                e.deposed.clear()
            elif event == F.DEPOSED:
                e.deposed_reason = F.ERRORS.get(reason) if reason else None
                e.deposed.set()
    elif kind == F.EV_WARNING:
        log.warning("%s", _decode(text))
    elif kind == F.EV_DROPPED:
        # Events were lost (out of memory): any lock may have been lost
        # unseen. Say so to every holder: stopping is safe, going on is
        # not.
        log.error("libredlock: %d events could not be queued: every lock "
                  "is reported lost", reason)
        for h in list(_lost_targets.values()):
            h.reason = "ENOMEM"
            h.event.set()
        for e in list(_election_targets.values()):
            e.deposed_reason = "ENOMEM"
            e.deposed.set()


# --- worker threads for asyncio ----------------------------------------------

class _Pool:
    """Threads for blocking calls made from asyncio and for the main
    thread's waits (_blocking): an idle one is reused, else a new one
    starts (no upper bound: a bounded pool deadlocks when every worker
    waits for a lock whose release is queued behind them). Idle workers
    exit after 30 s. Threads are started by a dispatcher thread, never
    by the caller: Thread.start() waits on a Condition, which a signal's
    exception (Ctrl-C on the main thread) can leave half released
    ("release unlocked lock"); submit() is one SimpleQueue.put."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._idle: "List[queue.SimpleQueue[Callable[[], Any]]]" = []
        self._inbox: "queue.SimpleQueue[Callable[[], Any]]" = \
            queue.SimpleQueue()
        threading.Thread(target=self._dispatch, daemon=True,
                         name="libredlock-pool").start()

    def submit(self, fn: Callable[[], Any]) -> None:
        self._inbox.put(fn)

    def _dispatch(self) -> None:
        while True:
            fn = self._inbox.get()
            with self._mutex:
                q = self._idle.pop() if self._idle else None
            if q is None:
                q = queue.SimpleQueue()
                threading.Thread(target=self._work, args=(q,), daemon=True,
                                 name="libredlock-worker").start()
            q.put(fn)
            del fn   # no reference kept while idle (a Lock's __del__)

    def _work(self, q: Any) -> None:
        while True:
            try:
                fn = q.get(timeout=30)
            except queue.Empty:
                with self._mutex:
                    if q in self._idle:
                        self._idle.remove(q)
                        return
                continue   # taken meanwhile: its call is on the way
            try:
                fn()
            except BaseException:
                log.exception("libredlock worker")
            fn = None   # no reference kept while idle (a Lock's __del__)
            with self._mutex:
                self._idle.append(q)


_pool = _Pool()


async def _in_thread(fn: Callable[[], Any],
                     undo: Optional[Callable[[Any], Any]] = None,
                     cancel: "Optional[_Canceller]" = None) -> Any:
    """Runs fn() on a worker thread; the event loop never blocks. If the
    awaiting task is cancelled: fn does not start if it has not yet;
    cancel(is_done) runs on a worker to end it early (an acquisition's
    wait), polling is_done(); when fn still succeeded, undo(result) runs on
    a worker (a lock acquired for a task that is gone is released),
    whether or not the event loop still runs.
    """
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    mu = threading.Lock()
    st: Dict[str, Any] = {"done": False, "ok": False, "value": None,
                          "abandoned": False}

    def deliver() -> None:
        if not fut.cancelled():
            if st["ok"]:
                fut.set_result(st["value"])
            else:
                fut.set_exception(st["value"])

    def work() -> None:
        with mu:
            if st["abandoned"]:
                st["done"] = True
                return   # cancelled before it began
        try:
            value, ok = fn(), True
        except BaseException as e:   # delivered to the awaiting task
            value, ok = e, False
        with mu:
            st.update(done=True, ok=ok, value=value)
            abandoned = st["abandoned"]
        if abandoned:
            if ok and undo is not None:
                undo(value)
            return
        try:
            loop.call_soon_threadsafe(deliver)
        except RuntimeError:   # the event loop is closed: nobody awaits
            if ok and undo is not None:
                undo(value)

    _pool.submit(work)
    try:
        return await fut
    except asyncio.CancelledError:
        with mu:
            st["abandoned"] = True
            done, ok, value = st["done"], st["ok"], st["value"]
        # Done already (its result delivered or on the way): undo here;
        # else the worker does when fn returns.
        if done and ok and undo is not None:
            u = undo
            _pool.submit(lambda: u(value))
        elif not done and cancel is not None:
            cn = cancel
            _pool.submit(lambda: cn(lambda: bool(st["done"])))
        raise


# --- Ctrl-C in a blocking call (issue 33) ------------------------------------
# A signal's Python handler runs on the main thread only, and only between
# bytecodes: while that thread waits inside a ctypes call (an acquisition's
# wait, a standby's campaign) KeyboardInterrupt came when the call returned
# (14 s after SIGINT in a 15 s wait; a standby's never). So the main
# thread's waiting calls run on a worker thread while the main thread
# waits on an Event (a lock wait that signals interrupt), and an
# interrupted wait cancels the call in C (redlock_sync_cancel: what it set
# on the masters is released) before the exception goes on. Other threads
# get no signals: they call directly.

# How long an interrupted call may take to end once cancelled (one loop
# turn and its release, normally a few ms) before the exception goes on
# anyway; the worker then undoes whatever the call still returns.
_CANCEL_BOUND = 5.0


def _blocking(run: Callable[[Callable[[], bool]], Any],
              cancel: Callable[[], Any], give_up: Callable[[], Any]) -> Any:
    """run(stopped) on a worker when called on the main thread (else
    here); its value, or its exception re-raised. stopped() turns true
    once the caller was interrupted (a sliced wait checks it between
    slices). On an exception while waiting (KeyboardInterrupt, a signal
    handler's): cancel() until run returns (bounded), then the exception
    goes on; if run returns after the caller was interrupted, the worker
    calls give_up().

    What run obtains (a grant, an election) it writes into a slot of the
    caller's (a ctypes pointer, written by the C call itself), never
    handed over by a Python call here: whoever gives it up (the worker's
    give_up(), the caller's except path) takes it with `p = slot.value;
    slot.value = None`, which no other thread and no signal handler can
    split, so exactly one of them releases it, whichever point an
    interrupt lands at."""
    if threading.current_thread() is not threading.main_thread():
        return run(lambda: False)
    # A raw lock, held until the worker is done: its acquire() is one C
    # call that a signal interrupts cleanly (an Event's Condition, whose
    # wait an exception can leave half done, is not).
    gate = threading.Lock()
    gate.acquire()
    st: Dict[str, Any] = {"abandoned": False, "queued": False,
                          "done": False, "ok": False, "value": None}

    def work() -> None:
        if not st["abandoned"]:   # else interrupted before it began
            try:
                st["value"], st["ok"] = \
                    run(lambda: bool(st["abandoned"])), True
            except BaseException as e:
                st["value"] = e
        st["done"] = True
        gate.release()
        if st["abandoned"]:
            give_up()

    try:
        _pool.submit(work)
        st["queued"] = True
        while not gate.acquire(timeout=0.05):
            pass
    except BaseException:
        st["abandoned"] = True   # first: no call before it
        end = time.monotonic() + _CANCEL_BOUND
        while st["queued"] and not st["done"] and time.monotonic() < end:
            try:
                cancel()
            except ClientClosed:
                break   # shut down: the call ends with it
            gate.acquire(timeout=0.005)
        raise
    if st["ok"]:
        return st["value"]
    raise st["value"]


def _take(slot: Any) -> Any:
    """The pointer in slot, emptied (no call between the read and the
    store: atomic against other threads and signal handlers)."""
    p = slot.value
    slot.value = None
    return p


# --- credentials a quorum refuses (issue 33) --------------------------------

def _auth_refusal(results: Iterable[MasterResult]) -> int:
    """How many masters refused this client's credentials in an attempt
    (their error text, as the CLI's wait.c reads it)."""
    n = 0
    for r in results:
        d = r.detail or ""
        if r.vote == "error" and ("WRONGPASS" in d or "NOAUTH" in d or
                                  "NOPERM" in d or d.startswith("AUTH: ")):
            n += 1
    return n


def _auth_error(err: RedlockError,
                quorum: int) -> Optional[AuthenticationError]:
    """An AuthenticationError for a failed attempt whose masters refusing
    the credentials leave fewer than `quorum` (waiting cannot help), else
    None."""
    res = getattr(err, "results", ())
    refused = _auth_refusal(res)
    if refused == 0 or len(res) - refused >= quorum:
        return None
    who = "; ".join(f"{r.server}: {r.detail}" for r in res
                    if _auth_refusal((r,)))
    return AuthenticationError(
        f"{refused} of {len(res)} masters refuse this client's credentials "
        f"(quorum {quorum}): check the password (password=, "
        f"REDLOCK_PASSWORD_FILE) and the user ({who})", "EAUTH", res)


# --- configuration -----------------------------------------------------------

@dataclass(frozen=True)
class TLS:
    """TLS settings for rediss:// masters (Client(tls=TLS(...)) or a dict
    with these keys). With TLS, masters given as bare host:port are reached
    over TLS; explicit redis:// and rediss:// schemes are kept."""
    ca_file: Optional[str] = None
    ca_dir: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    key_password: Optional[str] = None
    server_name: Optional[str] = None
    insecure: bool = False


def _servers(servers: Any, tls: bool) -> List[Optional[bytes]]:
    if isinstance(servers, str):
        servers = servers.split(",")
    if isinstance(servers, (bytes, bytearray)) or not isinstance(
            servers, Iterable):
        raise TypeError("servers must be a list of addresses (or one "
                        "comma-separated str)")
    out = []
    for s in servers:
        if not isinstance(s, str):
            raise TypeError("each server must be a str such as "
                            "'127.0.0.1:6379' or 'redis://host:port', not "
                            f"{type(s).__name__}")
        s = s.strip()
        if tls and s and "://" not in s:
            s = "rediss://" + s
        out.append(_cstr("server", s))
    if not out:
        raise ConfigError("servers: at least one master is needed",
                          "EINVAL")
    return out


# --- the environment the CLI reads (issue 33) -------------------------------

_UNITS = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0),
          ("d", 86400.0))


def parse_duration(text: str) -> float:
    """Seconds from a duration as the CLI reads one: "500ms", "10s",
    "2m", "1h", "1d", "1.5s", sums in decreasing units ("1m30s"); a bare
    number is seconds. ValueError otherwise."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"{text!r} is not a duration (e.g. 10s, 1m30s)")
    if all(ch.isdigit() or ch == "." for ch in text) and \
            text.count(".") <= 1 and text != ".":
        return float(text)
    total, last, i = 0.0, math.inf, 0
    while i < len(text):
        j = i
        while j < len(text) and (text[j].isdigit() or text[j] == "."):
            j += 1
        num = text[i:j]
        if not num or num.count(".") > 1 or num == "." or \
                not num.isascii():
            raise ValueError(f"{text!r} is not a duration (e.g. 10s, "
                             "1m30s)")
        for unit, scale in _UNITS:
            if text.startswith(unit, j) and not (
                    unit == "m" and text.startswith("ms", j)):
                break
        else:
            raise ValueError(f"{text!r} is not a duration (e.g. 10s, "
                             "1m30s)")
        if scale >= last:
            raise ValueError(f"{text!r}: units must decrease (1m30s)")
        last = scale
        total += float(num) * scale
        i = j + len(unit)
    return total


def _env(name: str) -> Optional[str]:
    v = os.environ.get(name)
    return v if v else None


def _env_bool(name: str) -> Optional[bool]:
    v = _env(name)
    if v is None:
        return None
    if v.lower() in ("1", "true", "yes"):
        return True
    if v.lower() in ("0", "false", "no"):
        return False
    raise ConfigError(f"{name}={v!r} is not a boolean (1/0, true/false, "
                      "yes/no)", "EINVAL")


def _secret(name: str, path: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(1023)
    except OSError as e:
        raise ConfigError(f"{name}: cannot read {path}: {e.strerror}",
                          "EINVAL") from None
    return data.split(b"\r", 1)[0].split(b"\n", 1)[0].decode("utf-8")


def _from_environment() -> Dict[str, Any]:
    """Client options from the REDLOCK_* variables the CLI reads:
    REDLOCK_SERVERS, REDLOCK_PASSWORD_FILE (else REDLOCK_PASSWORD),
    REDLOCK_USERNAME, REDLOCK_TLS_CA, _CA_DIR, _CERT, _KEY,
    _KEY_PASSWORD_FILE, _SERVER_NAME, _INSECURE, REDLOCK_DURABLE,
    REDLOCK_RESTART_GUARD ("off" or a duration), REDLOCK_MAX_TTL."""
    out: Dict[str, Any] = {}
    servers = _env("REDLOCK_SERVERS")
    if servers is None:
        raise ConfigError("no servers: pass them to Client() or set "
                          "REDLOCK_SERVERS", "EINVAL")
    out["servers"] = servers
    pf = _env("REDLOCK_PASSWORD_FILE")
    if pf is not None:
        out["password"] = _secret("REDLOCK_PASSWORD_FILE", pf)
    elif _env("REDLOCK_PASSWORD") is not None:
        out["password"] = _env("REDLOCK_PASSWORD")
    if "password" in out and _env("REDLOCK_USERNAME") is not None:
        out["username"] = _env("REDLOCK_USERNAME")
    tls: Dict[str, Any] = {}
    for var, field in (("REDLOCK_TLS_CA", "ca_file"),
                       ("REDLOCK_TLS_CA_DIR", "ca_dir"),
                       ("REDLOCK_TLS_CERT", "cert_file"),
                       ("REDLOCK_TLS_KEY", "key_file"),
                       ("REDLOCK_TLS_SERVER_NAME", "server_name")):
        if _env(var) is not None:
            tls[field] = _env(var)
    kpf = _env("REDLOCK_TLS_KEY_PASSWORD_FILE")
    if kpf is not None:
        tls["key_password"] = _secret("REDLOCK_TLS_KEY_PASSWORD_FILE", kpf)
    if _env_bool("REDLOCK_TLS_INSECURE"):
        tls["insecure"] = True
    if tls:
        out["tls"] = TLS(**tls)
    if _env_bool("REDLOCK_DURABLE"):
        out["durable"] = True
    g = _env("REDLOCK_RESTART_GUARD")
    if g is not None:
        try:
            out["restart_guard"] = -1 if g == "off" else parse_duration(g)
        except ValueError:
            raise ConfigError(f"REDLOCK_RESTART_GUARD={g!r} is not a "
                              "duration or off", "EINVAL") from None
        if out["restart_guard"] == 0:
            out["restart_guard"] = -1
    m = _env("REDLOCK_MAX_TTL")
    if m is not None:
        try:
            out["max_ttl"] = parse_duration(m)
        except ValueError:
            out["max_ttl"] = 0.0
        if out["max_ttl"] <= 0:
            raise ConfigError(f"REDLOCK_MAX_TTL={m!r} is not a duration "
                              "(e.g. 10m, 1h)", "EINVAL")
    return out


# --- the client ----------------------------------------------------------------

class Client:
    """A set of Redis masters and one connection to each, shared by every
    lock of the client and safe to use from many threads and from asyncio.

    ``servers``: addresses as the C library takes them:
    ``host:port``, ``redis://[user[:password]@]host[:port][/db]``,
    ``rediss://...`` (TLS), ``unix:///path``, optionally ``?durable=1``;
    a list, or one comma-separated str. Durations are in seconds.

    Keyword options (None keeps the C library's default, see docs/API.md's
    configuration table): ``password``, ``username``, ``tls`` (True, a
    :class:`TLS` or a dict), ``durable`` (declare every master durable:
    appendonly + appendfsync always), ``quorum``, ``key_prefix``,
    ``connect_timeout``, ``command_timeout``, ``retry_count``,
    ``retry_delay``, ``retry_jitter``, ``restart_guard`` (seconds; -1 turns
    the guard off, for masters that cannot lose keys), ``max_ttl``,
    ``clock_tolerance``, ``drift_factor``, ``renew_batch``.
    Configuration warnings (a replica given as a master...) go to the
    ``libredlock`` logger.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, servers: Union[str, Sequence[str], None] = None, *,
                 password: Optional[str] = None,
                 username: Optional[str] = None,
                 tls: Union[bool, TLS, Dict[str, Any], None] = None,
                 durable: bool = False, quorum: Optional[int] = None,
                 key_prefix: Optional[str] = None,
                 connect_timeout: Optional[float] = None,
                 command_timeout: Optional[float] = None,
                 retry_count: Optional[int] = None,
                 retry_delay: Optional[float] = None,
                 retry_jitter: Optional[float] = None,
                 restart_guard: Optional[float] = None,
                 max_ttl: Optional[float] = None,
                 clock_tolerance: Optional[float] = None,
                 drift_factor: Optional[float] = None,
                 renew_batch: Optional[int] = None) -> None:
        # None only while this runs (close() and __del__ of a Client
        # whose __init__ raised find it so).
        self._hd: _Handle = None  # type: ignore[assignment]
        if servers is None:
            # As the CLI: the REDLOCK_* environment, each value only where
            # the caller passed none.
            env = _from_environment()
            servers = env.pop("servers")
            password = password if password is not None else \
                env.get("password")
            username = username if username is not None else \
                env.get("username")
            if tls is None and "tls" in env:
                tls = env["tls"]
            durable = durable or env.get("durable", False)
            if restart_guard is None:
                restart_guard = env.get("restart_guard")
            if max_ttl is None:
                max_ttl = env.get("max_ttl")
        if tls is True:
            tls = TLS()
        elif isinstance(tls, dict):
            tls = TLS(**tls)
        elif tls is not None and tls is not False and not isinstance(
                tls, TLS):
            raise TypeError("tls must be True, a libredlock.TLS or a dict")
        addrs = _servers(servers, bool(tls))
        self._quorum = len(addrs) // 2 + 1
        cfg = F.ClientConfig()
        arr = (ctypes.c_char_p * len(addrs))(*addrs)
        cfg.servers = arr
        cfg.n_servers = len(addrs)
        keep: List[Any] = [arr]   # alive until redlock_sync_new copied them
        for field, name, value in (("password", "password", password),
                                   ("username", "username", username),
                                   ("key_prefix", "key_prefix", key_prefix)):
            b = _cstr(name, value)
            keep.append(b)
            setattr(cfg, field, b)
        if tls:
            for field in ("ca_file", "ca_dir", "cert_file", "key_file",
                          "key_password", "server_name"):
                b = _cstr("tls." + field, getattr(tls, field))
                setattr(cfg, "tls_" + field, b)
            cfg.tls_insecure = 1 if tls.insecure else 0
        if not isinstance(durable, bool):
            raise TypeError("durable must be True or False")
        cfg.durable = 1 if durable else 0
        if quorum is not None:
            if isinstance(quorum, bool) or not isinstance(quorum, int):
                raise TypeError("quorum must be an int")
            if quorum < 1 or quorum > len(addrs):
                raise ConfigError(f"quorum {quorum} out of range 1.."
                                  f"{len(addrs)}", "EINVAL")
            cfg.quorum = quorum
            self._quorum = quorum
        self._command_timeout_ms = 50
        duration: Optional[float]
        for field, name, duration, lo in (
                ("connect_timeout_ms", "connect_timeout", connect_timeout, 1),
                ("command_timeout_ms", "command_timeout", command_timeout, 1),
                ("retry_delay_ms", "retry_delay", retry_delay, 0),
                ("retry_jitter_ms", "retry_jitter", retry_jitter, 0),
                ("max_ttl_ms", "max_ttl", max_ttl, 1),
                ("clock_tolerance_ms", "clock_tolerance", clock_tolerance,
                 1)):
            if duration is not None:
                ms = _ms(name, duration, lo)
                if ms == 0:
                    ms = -1   # an explicit zero: "none" in the C config
                setattr(cfg, field, ms)
        if command_timeout is not None:
            self._command_timeout_ms = cfg.command_timeout_ms
        if restart_guard is not None:
            if _number("restart_guard", restart_guard) < 0:
                cfg.restart_guard_ms = -1
            else:
                cfg.restart_guard_ms = _ms("restart_guard", restart_guard, 1)
        if retry_count is not None:
            rc = _count("retry_count", retry_count)
            cfg.retry_count = -1 if rc <= 0 else rc
        if drift_factor is not None:
            if _number("drift_factor", drift_factor) <= 0:
                raise ConfigError("drift_factor must be > 0", "EINVAL")
            cfg.drift_factor = float(drift_factor)
        if renew_batch is not None:
            cfg.renew_batch = _count("renew_batch", renew_batch)
        f = F.lib.load()
        cfg.on_warning = _c_callback(F.WARNING_CB,
                                     "redlock_sync_queue_warning")
        _start_reader()
        ptr = ctypes.c_void_p()
        rc = f.redlock_sync_new(ctypes.byref(cfg), ctypes.byref(ptr))
        if rc != 0:
            raise _error(f, rc, "Client")
        self._f = f
        self._hd = _Handle(f, ptr.value)
        _open_handles.add(self._hd)
        self.servers = tuple(_decode(a) for a in addrs)

    # -- life cycle --

    def close(self) -> None:
        """Ends every call in flight (ClientClosed in those threads),
        releases every lock still held, closes the connections. Idempotent.
        Blocks for at most about one command timeout."""
        if self._hd is not None:
            self._hd.close()

    @property
    def closed(self) -> bool:
        return self._hd is None or self._hd.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """close() on a worker thread."""
        await _in_thread(self.close)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<libredlock.Client {state} {list(self.servers)}>"

    # -- the call path --

    def _call(self, what: Any, fn: Any, *args: Any,
              classes: Optional[Dict[int, type]] = None) -> None:
        """fn(client handle, *args) on an open client; raises for a
        status < 0."""
        rc = fn(self._hd.enter(), *args)
        if rc != 0:
            raise _error(self._f, rc, what, classes)

    def _call_on(self, what: Any, fn: Any, *args: Any,
                 classes: Optional[Dict[int, type]] = None) -> None:
        """fn(*args) (a lock's or an election's call) on an open client."""
        self._hd.enter()
        rc = fn(*args)
        if rc != 0:
            raise _error(self._f, rc, what, classes)

    # -- locks --

    def lock(self, name: Union[Resource, List[Resource], Tuple[Resource, ...]],
             ttl: float = 30, wait: Optional[float] = None, *,
             fence: bool = False, auto_extend: bool = True,
             lost_margin: Optional[float] = None, heal: bool = False,
             retry_count: Optional[int] = None,
             retry_delay: Optional[float] = None,
             retry_jitter: Optional[float] = None,
             holder: Optional[str] = None) -> "Lock":
        """A lock on ``name`` (str or bytes), or on several names at once
        when given a list or tuple (all of them or none, one script per
        master). Not acquired yet: use ``with`` / ``async with``, or
        :meth:`Lock.acquire`.

        ``ttl``: seconds of validity per grant (the lock is extended every
        ttl/3 while held when ``auto_extend``). ``wait``: seconds to keep
        trying (WaitTimeout after), 0 for one attempt, None for the
        client's retry policy (3 retries). ``fence``: ask for a fencing
        token (``lock.fence``, one extra round trip). ``lost_margin``:
        seconds before the validity ends at which a lock that could not be
        extended is declared lost (``lock.lost`` is set); default ttl/10.
        ``holder``: who holds it, 1..80 bytes (say ``f"{host}:{pid}"``),
        stored in the value (``<40 hex>.<holder>``, one opaque string to
        other Redlock libraries) for :meth:`inspect` and ``redlock
        status`` to show; readable by anyone who reads the keys.
        """
        if isinstance(name, (list, tuple)):
            names = [_resource(n) for n in name]
            if not names:
                raise ConfigError("a multi-resource lock needs at least "
                                  "one name", "EINVAL")
        else:
            names = [_resource(name)]
        return Lock(self, names, None, ttl, wait, fence, auto_extend,
                    lost_margin, heal, retry_count, retry_delay,
                    retry_jitter, multi=isinstance(name, (list, tuple)),
                    holder=holder)

    def rwlock(self, name: Resource) -> "RWLock":
        """A read-write lock on ``name``: ``.read(...)`` and ``.write(...)``
        give locks (phase-fair: neither side starves)."""
        return RWLock(self, _resource(name))

    def synchronize(self, name: Resource, ttl: float = 30,
                    wait: Optional[float] = None, **options: Any
        ) -> Callable[[_F], _F]:
        """A decorator: every call of the function runs holding the lock
        ``name`` (``with self.lock(name, ttl, wait, **options)``; a
        coroutine function under ``async with``). pottery's spelling
        (``@synchronize``): ``locked`` is the query
        (:meth:`Lock.locked`, as threading's and redis-py's)."""
        def decorate(fn: _F) -> _F:
            if asyncio.iscoroutinefunction(fn):
                @functools.wraps(fn)
                async def arun(*args: Any, **kwargs: Any) -> Any:
                    async with self.lock(name, ttl, wait, **options):
                        return await fn(*args, **kwargs)
                return cast(_F, arun)

            @functools.wraps(fn)
            def run(*args: Any, **kwargs: Any) -> Any:
                with self.lock(name, ttl, wait, **options):
                    return fn(*args, **kwargs)
            return cast(_F, run)
        return decorate

    def inspect(self, name: Resource) -> "LockStatus":
        """Who holds the lock ``name`` now, read from every master,
        changing nothing (``redlock status``): a :class:`LockStatus`.
        Raises NoQuorum when too few masters answered."""
        res = _resource(name)
        out = ctypes.POINTER(F.Result)()
        f = self._f
        try:
            rc = f.redlock_sync_inspect(self._hd.enter(), res, len(res),
                                        ctypes.byref(out))
            if rc != 0:
                raise _error(f, rc, f"inspect {_decode(res)!r}")
            return LockStatus._from(out.contents, self._quorum)
        finally:
            if out:
                f.redlock_sync_free(out)

    def adopt(self, name: Resource, token: str, ttl: float = 30) -> "Lock":
        """Takes over the lock ``name`` acquired elsewhere under ``token``
        (another process's, ``redlock acquire``'s): a held :class:`Lock`,
        extended to ``ttl`` at once (Lost when that token holds it no
        more; then nothing is kept). Its ``extend()`` and ``release()``
        act on it; it is not extended automatically."""
        tok = _cstr("token", token)
        if tok is None:
            raise TypeError("token must be a str")
        lock = Lock(self, [_resource(name)], None, ttl, None, False, False,
                    None, False, None, None, None)
        lock._adopt(tok)
        try:
            lock.extend()
        except BaseException:
            try:   # frees the handle (the keys are not ours)
                lock.release()
            except RedlockError:
                pass
            raise
        return lock

    def force_unlock(self, name: Resource) -> None:
        """An operator's forced release of ``name`` (``redlock unlock
        --force``): its keys deleted on every master whoever holds them,
        its waiters woken. The holder is not told until its next
        extension finds the lock gone (it sets ``lost``): for a holder
        known to be dead or stuck. Raises NoQuorum unless every master
        answered (the keys may stay there until their ttl)."""
        res = _resource(name)
        self._call(f"force_unlock {_decode(res)!r}",
                   self._f.redlock_sync_force_release, res, len(res))

    # -- counting semaphores --

    def semaphore(self, name: Resource, limit: int, ttl: float = 30,
                  wait: Optional[float] = None, *, fence: bool = False,
                  auto_extend: bool = True,
                  lost_margin: Optional[float] = None, heal: bool = False,
                  retry_count: Optional[int] = None,
                  retry_delay: Optional[float] = None,
                  retry_jitter: Optional[float] = None,
                  holder: Optional[str] = None) -> "Semaphore":
        """A counting semaphore on ``name``: at most ``limit`` holders at
        once across every client (1..1024). A :class:`Semaphore`, used as
        a lock (``with``, ``async with``, acquire/release, ``lost``, the
        same options as :meth:`lock`); ``.permit`` says which of the
        ``limit`` permits it holds. Every user of ``name`` must pass the
        same ``limit``: another one raises :class:`LimitMismatch` (change
        it with :meth:`semaphore_set_limit`)."""
        return Semaphore(self, [_resource(name)], None, ttl, wait, fence,
                         auto_extend, lost_margin, heal, retry_count,
                         retry_delay, retry_jitter,
                         limit=_limit("limit", limit), holder=holder)

    def semaphore_status(self, name: Resource, limit: int
        ) -> "SemaphoreStatus":
        """The semaphore ``name`` as its masters hold it, changing
        nothing: a :class:`SemaphoreStatus` (the limit a quorum holds,
        permits held and free, each permit some master holds). ``limit``:
        the caller's (any valid one: the masters' is in the answer).
        Raises NoQuorum when too few masters answered."""
        res = _resource(name)
        k = _limit("limit", limit)
        out = ctypes.POINTER(F.SemaphoreInfo)()
        f = self._f
        try:
            rc = f.redlock_sync_semaphore_inspect(
                self._hd.enter(), res, len(res), k, ctypes.byref(out))
            if rc != 0:
                raise _error(f, rc, f"semaphore_status {_decode(res)!r}")
            return SemaphoreStatus._from(out.contents)
        finally:
            if out:
                f.redlock_sync_free(out)

    def semaphore_set_limit(self, name: Resource, limit: int) -> None:
        """Changes the semaphore ``name``'s limit on every master.
        Raising lets more holders in at once; shrinking evicts nobody (a
        holder of a permit >= limit keeps it until it releases or its ttl
        runs out) but grants no such permit any more. Users still on the
        old limit get LimitMismatch. Raises NoQuorum unless every master
        confirmed (call it again)."""
        res = _resource(name)
        self._call(f"semaphore_set_limit {_decode(res)!r}",
                   self._f.redlock_sync_semaphore_set_limit, res, len(res),
                   _limit("limit", limit))

    def semaphore_force_release(self, name: Resource, limit: int, permit: int
        ) -> None:
        """An operator's forced release of one permit of ``name``
        (its index, as :meth:`semaphore_status` shows it), whoever holds
        it. The holder is not told until its next extension."""
        res = _resource(name)
        if isinstance(permit, bool) or not isinstance(permit, int) or \
                not 0 <= permit < _MAX_PERMITS:
            raise ConfigError(f"permit {permit!r} out of range "
                              f"(0..{_MAX_PERMITS - 1})", "EINVAL")
        self._call(f"semaphore_force_release {_decode(res)!r}",
                   self._f.redlock_sync_semaphore_force_release, res,
                   len(res), _limit("limit", limit), permit)

    # -- elections --

    def campaign(self, name: Resource, id: str, ttl: float = 10,
                 wait: Optional[float] = None, *, once: bool = True,
                 step_down: Optional[float] = None) -> "Election":
        """Blocks until this instance leads ``name`` (or ``wait`` seconds
        pass: WaitTimeout; None waits for as long as it takes) and returns
        the :class:`Election`. ``id`` is this instance's identity (1..80
        bytes), which :meth:`leader` shows to everyone. The leadership is
        extended every ttl/3; a leader that cannot extend steps down
        ``step_down`` seconds (default ttl/10) before its validity ends:
        ``election.deposed`` is set and ``is_leader`` turns False. With
        ``once=False`` it campaigns again after a loss."""
        e = Election(self, _resource(name), id, ttl, once, step_down)
        e._campaign(wait)
        return e

    async def acampaign(self, name: Resource, id: str, ttl: float = 10,
                        wait: Optional[float] = None, *, once: bool = True,
                        step_down: Optional[float] = None) -> "Election":
        """campaign() on a worker thread (the event loop never blocks).
        A task cancelled while it campaigns resigns what it wins."""
        e: Election = await _in_thread(
            lambda: self.campaign(name, id, ttl, wait, once=once,
                                  step_down=step_down),
            undo=lambda e: e.resign())
        return e

    def leader(self, name: Resource) -> Optional["Leader"]:
        """Who leads ``name`` now, read from every master: a
        :class:`Leader` (its id and the seconds it stays leader without an
        extension), or None when nobody does."""
        res = _resource(name)
        buf = ctypes.create_string_buffer(128)
        ttl = ctypes.c_int64()
        self._call("leader", self._f.redlock_sync_leader, res, len(res),
                   buf, len(buf), ctypes.byref(ttl))
        if not buf.value:
            return None
        return Leader(_decode(buf.value), ttl.value / 1000)

    # -- stats --

    def stats(self) -> "Stats":
        """The client's counters and per-master latency histograms, and
        their Prometheus text (``stats.prometheus``)."""
        st = F.Stats()
        hd = self._hd
        # The strings point into the client, which a shutdown frees: read
        # and copied under the gate, which close() holds to shut down.
        with hd.gate:
            hd.reading = threading.get_ident()
            try:
                rc = self._f.redlock_sync_stats(hd.enter(),
                                                ctypes.byref(st))
                if rc != 0:
                    raise _error(self._f, rc, "stats")
                return Stats(self._f, st)
            finally:
                hd.reading = None


@dataclass(frozen=True)
class Leader:
    id: str
    ttl: float


@dataclass(frozen=True)
class HolderStatus:
    """One master's view of a lock (Client.inspect)."""
    server: str
    holder: str    # the token it holds ("" when free there)
    ttl: float     # seconds left there (0.0 when free)


@dataclass(frozen=True)
class LockStatus:
    """A lock as its masters hold it (Client.inspect)."""
    held: bool        # a quorum holds one token
    holder: str       # the token most masters hold ("" when none)
    masters: int      # how many masters hold that token
    ttl: float        # seconds until fewer than a quorum hold it
    rw: bool          # a read-write lock of the same name exists
    per_master: Tuple[HolderStatus, ...]   # each master that answered
    # the holder part of that token (holder=, `redlock run --id`), or None
    holder_id: Optional[str] = None

    @classmethod
    def _from(cls, res: Any, quorum: int) -> "LockStatus":
        per = []
        count: Dict[str, List[float]] = {}
        rw = False
        for i in range(res.n_nodes):
            n = res.nodes[i]
            rw = rw or bool(n.rw_lock)
            if n.vote == 0 or n.vote == 3:   # not asked, or unreachable
                continue
            holder = _decode(n.holder) if n.vote == 1 else ""
            ttl = max(n.pttl_ms, 0) / 1000 if holder else 0.0
            per.append(HolderStatus(_decode(n.server), holder, ttl))
            if holder:
                count.setdefault(holder, []).append(ttl)
        holder, ttls = max(count.items(), key=lambda kv: len(kv[1]),
                           default=("", []))
        ttls = sorted(ttls, reverse=True)
        held = len(ttls) >= quorum
        return cls(held, holder, len(ttls),
                   ttls[quorum - 1] if held else 0.0, rw, tuple(per),
                   token_holder(holder) if holder else None)


# --- locks ---------------------------------------------------------------------

def _default_margin(ttl_ms: int, command_timeout_ms: int) -> int:
    """How long before its validity ends a lock that could not be extended
    is declared lost (a leader steps down): ttl/10, at least two command
    timeouts, as the CLI's run; ttl/10 when that would reach half the ttl.
    """
    margin = max(ttl_ms // 10, 2 * command_timeout_ms)
    if 2 * margin >= ttl_ms:
        margin = ttl_ms // 10
    return max(margin, 1)

# The shortest ttl a lock or a leadership may have: as the CLI's (a lock
# must outlive its own round trips; a 2 ms ttl was accepted and spun on).
MIN_TTL_MS = 100


def _ttl_ms(name: str, value: object, command_timeout_ms: int) -> int:
    """A ttl in ms: at least 100 ms and two command timeouts (the CLI's
    rule for --ttl), at most a C int."""
    ms = _ms(name, value, 1)
    least = max(MIN_TTL_MS, 2 * command_timeout_ms)
    if ms < least:
        raise ConfigError(f"{name} {value!r} s is too short to be safe: at "
                          f"least {least / 1000:g} s (2 x command_timeout, "
                          f"and {MIN_TTL_MS / 1000:g} s)", "EINVAL")
    return ms


# A wait of seconds as the acquisition takes it: -1 one attempt (0 s),
# 0 the client's retry policy (None), > 0 ms, or _FOREVER (math.inf, -1:
# until granted, as threading's timeout=-1).
_FOREVER = -2


def _wait_ms(wait: object) -> int:
    if wait is None:
        return 0
    if not isinstance(wait, bool) and isinstance(wait, (int, float)) and \
            (wait == -1 or wait == math.inf):
        return _FOREVER
    w = _ms("wait", wait, 0)
    return -1 if w == 0 else w


# A long wait runs in slices of at most this long: between two, a quorum
# that refuses our credentials ends it (AuthenticationError), and a
# cancelled call stops.
_SLICE_MS = 1000


class _Held:
    """One acquisition: the C handle and its lost signal. `busy` is held
    around each call on the handle and by release() while it takes the
    pointer away (the C release frees the handle): a short wait, never
    an acquisition's. Reentrant: a signal handler that releases runs on a
    thread whose call below has returned already."""
    __slots__ = ("ptr", "id", "event", "reason", "busy")

    def __init__(self, event: threading.Event) -> None:
        self.ptr: Optional[int] = None
        self.id = next(_ids)
        self.event = event
        self.reason: Optional[str] = None
        self.busy = threading.RLock()


class Lock:
    """A lock (plain, multi-resource, or one side of a read-write lock).

    ``with client.lock("job-42", ttl=30, wait=5) as lock:`` acquires it,
    keeps extending it while the block runs, and releases it when the
    block ends, also on an exception. Inside:

    * ``lock.lost`` (a threading.Event) is set if the lock is lost: an
      extension found it gone or someone else's, or none succeeded until
      ``lost_margin`` before the validity ends. Stop the work then. When
      the block ends normally after a loss, the exit raises :class:`Lost`.
    * ``lock.validity``: seconds the lock is still safe to use;
      ``lock.fence``: the fencing token (with ``fence=True``);
      ``lock.token``: this grant's random value.

    ``async with`` does the same without blocking the event loop. A lock
    object can be acquired again after it was released.
    """

    def __init__(self, client: Client, names: List[bytes], side: Optional[int],
                 ttl: float, wait: Optional[float], fence: bool,
                 auto_extend: bool, lost_margin: Optional[float], heal: bool,
                 retry_count: Optional[int], retry_delay: Optional[float],
                 retry_jitter: Optional[float], multi: bool = False,
                 limit: Optional[int] = None,
                 holder: Optional[str] = None) -> None:
        self._client = client
        self._names = names
        self._side = side
        self._multi = multi
        self._limit = limit   # a Semaphore's
        self._ttl_ms = _ttl_ms("ttl", ttl, client._command_timeout_ms)
        o = F.AcquireOpts()
        self._wait_ms = _wait_ms(wait)
        o.wait_ms = 0
        if retry_count is not None:
            rc = _count("retry_count", retry_count)
            o.retry_count = -1 if rc <= 0 else rc
        if retry_delay is not None:
            o.retry_delay_ms = _ms("retry_delay", retry_delay, 0) or -1
        if retry_jitter is not None:
            o.retry_jitter_ms = _ms("retry_jitter", retry_jitter, 0) or -1
        for flag, v in (("fence", fence), ("auto_extend", auto_extend),
                        ("heal", heal)):
            if not isinstance(v, bool):
                raise TypeError(f"{flag} must be True or False")
        o.fence = 1 if fence else 0
        o.auto_extend = 1 if auto_extend else 0
        o.heal = 1 if heal else 0
        o.wake = 1
        # kept: the opts point at it for as long as the lock is used
        self._holder_b = _holder(holder)
        o.holder = self._holder_b
        if auto_extend:
            o.on_lost = _c_callback(F.LOST_CB, "redlock_sync_queue_lost")
            if lost_margin is None:
                margin = _default_margin(self._ttl_ms,
                                         client._command_timeout_ms)
            else:
                margin = _ms("lost_margin", lost_margin, 0)
                if 2 * margin >= self._ttl_ms:
                    raise ConfigError("lost_margin must be below half the "
                                      "ttl", "EINVAL")
            o.lost_margin_ms = margin
        self._opts = o
        self._fence_wanted = fence
        # Guards the state below, never held across a call that waits
        # (another thread's acquire(wait=...) must not stop a getter or a
        # release). Reentrant: a signal handler may run inside it.
        self._mutex = threading.RLock()
        self._held: Optional[_Held] = None
        self._acquiring: Optional[int] = None   # the thread in acquire()
        self._acq_id: Optional[int] = None   # its id (lost_arg), for a cancel
        self._cancel_id: Optional[int] = None   # an acquisition cancelled
        self._abandon = False    # release() ran inside that acquire()
        self.lost = threading.Event()
        self._lost_reason: Optional[str] = None

    # -- names --

    @property
    def name(self) -> Union[str, Tuple[str, ...]]:
        """The lock's name (str when it was given as one), or a tuple of
        them for a multi-resource lock."""
        ns = tuple(_decode(n) for n in self._names)
        return ns if self._multi else ns[0]

    def __repr__(self) -> str:
        state = "held" if self._held is not None else "not held"
        side = {F.READ: " read", F.WRITE: " write"}.get(self._side or 0, "")
        return f"<libredlock.Lock{side} {self.name!r} {state}>"

    # -- acquire / release --

    @overload
    def acquire(self) -> "Lock":
        ...

    @overload
    def acquire(self, blocking: bool = ...,
                timeout: Optional[float] = ...
                ) -> "Union[Lock, Literal[False]]":
        ...

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None
                ) -> "Union[Lock, Literal[False]]":
        """Acquires the lock (blocking as ``wait`` allows); returns self.
        Raises LockTaken, NoQuorum, WaitTimeout, AuthenticationError,
        ConfigError, ClientClosed.

        threading.Lock's and redis-py's spellings: ``acquire(blocking=False)``
        makes one attempt, ``acquire(timeout=5)`` waits up to 5 s,
        ``acquire(timeout=-1)`` until granted (as does ``wait=-1`` or
        ``wait=math.inf``); given either argument, a lock that is not
        granted in time returns False instead of raising (LockTaken,
        NoQuorum, WaitTimeout); other errors still raise. On the main
        thread a wait ends within about 50 ms of a signal whose handler
        raises (Ctrl-C): the acquisition is cancelled, nothing is left
        held."""
        boolean = blocking is not True or timeout is not None
        if not isinstance(blocking, bool):
            raise TypeError("blocking must be True or False")
        if not blocking:
            if timeout is not None and timeout != -1:
                raise ValueError("can't specify a timeout for a "
                                 "non-blocking call")
            wait_ms = -1
        elif timeout is not None:
            wait_ms = _wait_ms(timeout)
        else:
            wait_ms = self._wait_ms
        if not boolean:
            return self._acquire(wait_ms)
        try:
            return self._acquire(wait_ms)
        except (LockTaken, NoQuorum, WaitTimeout):
            return False

    def _acquire(self, wait_ms: int) -> "Lock":
        c = self._client
        f = c._f
        me = threading.get_ident()
        c._hd.enter()   # ClientClosed when closed or the parent's
        held = _Held(self.lost)
        slot = ctypes.c_void_p()   # the grant, written by the C call
        claimed = recorded = False
        try:
            with self._mutex:
                if self._held is not None:
                    raise RedlockError(f"{self.name!r} is already held by "
                                       "this Lock object", "EBUSY")
                if self._acquiring is not None:
                    raise RedlockError(f"{self.name!r} is being acquired "
                                       "by another call on this Lock "
                                       "object", "EBUSY")
                # No call between these two: an exception cannot split
                # them (the finally below undoes the claim).
                self._acquiring = me
                claimed = True
                self._abandon = False
                if self.lost.is_set():
                    self.lost.clear()
                self._lost_reason = None
            # This acquisition's options (the wait is per call); its id:
            # its lost events' and its cancel's.
            o = F.AcquireOpts.from_buffer_copy(self._opts)
            o.lost_arg = held.id
            self._acq_id = held.id
            self._cancel_id = None
            if o.auto_extend:
                _lost_targets[held.id] = held
            err = _blocking(
                lambda stopped: self._attempts(o, wait_ms, held.id, slot,
                                               stopped),
                lambda: self._cancel_now(held.id),
                lambda: _release_taken(f, slot))
            if err is not None:
                raise err
            with self._mutex:
                # No call between these: a signal cannot split them.
                held.ptr = slot.value
                slot.value = None
                self._held = held
                c._hd.held[held.id] = held
                recorded = True
                abandon = self._abandon
                if c._hd.closed and not held.event.is_set():
                    # close() ran after the grant, before it was recorded
                    # here: it released it, and its holder must know.
                    held.reason = "ECANCELED"
                    held.event.set()
        except BaseException:
            # Granted, but an exception (Ctrl-C, a signal handler's) came
            # before it was recorded: nobody would ever release it. The
            # release first, with no call before it (another interrupt
            # may land after any call). A grant still to come (the call
            # goes on on a worker) is released there (_blocking).
            ptr = slot.value
            slot.value = None
            if not recorded and ptr:
                f.redlock_sync_release(ptr)
            if not recorded:
                _lost_targets.pop(held.id, None)
            raise
        finally:
            if claimed:
                self._acq_id = None
                self._acquiring = None
        if abandon:
            # A signal handler on this thread released it while this call
            # was recording the grant: release it now, and say so.
            try:
                self.release()
            except RedlockError:
                pass
            raise Lost(f"{self.name!r} was released during its "
                       "acquisition (by a signal handler)", "ECANCELED")
        return self

    def _acquire_once(self, o: Any, out: Any) -> int:
        """One C acquisition with the options o (its wait_ms)."""
        c = self._client
        f = c._f
        ptr = c._hd.enter()
        if self._side is not None:
            return int(f.redlock_sync_acquire_rw(
                ptr, self._names[0], len(self._names[0]), self._side,
                self._ttl_ms, ctypes.byref(o), ctypes.byref(out)))
        if self._limit is not None:
            return int(f.redlock_sync_acquire_sem(
                ptr, self._names[0], len(self._names[0]), self._limit,
                self._ttl_ms, ctypes.byref(o), ctypes.byref(out)))
        if self._multi:
            k = len(self._names)
            arr = (ctypes.c_char_p * k)(*self._names)
            lens = (ctypes.c_size_t * k)(*map(len, self._names))
            return int(f.redlock_sync_acquire_multi(
                ptr, arr, lens, k, self._ttl_ms, ctypes.byref(o),
                ctypes.byref(out)))
        return int(f.redlock_sync_acquire(
            ptr, self._names[0], len(self._names[0]), self._ttl_ms,
            ctypes.byref(o), ctypes.byref(out)))

    def _attempts(self, o: Any, wait_ms: int, acq: int, slot: Any,
                  stopped: Callable[[], bool]) -> Optional[RedlockError]:
        """The acquisition: None, the grant in slot; or the exception
        (made on this thread (the C library's
        last error and result are per thread). A wait (> 0 or forever)
        starts with one attempt, then goes on in slices of _SLICE_MS:
        after each, masters that refuse the credentials and leave no
        quorum end it (AuthenticationError at once, not after the whole
        wait), as does a cancel (stopped(), or the asyncio task's)."""
        c = self._client
        sliced = wait_ms == _FOREVER or wait_ms > 0
        start = time.monotonic()
        first = True
        last = None
        while True:
            if not sliced:
                o.wait_ms = wait_ms
            elif first:
                o.wait_ms = -1
            elif wait_ms == _FOREVER:
                o.wait_ms = _SLICE_MS
            else:
                left = wait_ms - int((time.monotonic() - start) * 1000)
                if left <= 0:
                    assert last is not None   # one attempt came first
                    return WaitTimeout(
                        f"acquire {self.name!r}: not granted within "
                        f"{wait_ms / 1000:g} s ({last})", "ETIMEDOUT",
                        last.results)
                o.wait_ms = min(left, _SLICE_MS)
            rc = self._acquire_once(o, slot)
            if rc == 0:
                return None
            err = _error(c._f, rc, ("acquire", self))
            auth = _auth_error(err, c._quorum)
            if auth is not None:
                return auth
            if not sliced or stopped() or self._cancel_id == acq or \
                    rc not in (F.ETAKEN, F.ENOQUORUM, F.EEXPIRED,
                               F.ETIMEDOUT):
                return err
            first = False
            last = err

    def _adopt(self, token: bytes) -> None:
        """The C handle of a lock held elsewhere under token, recorded
        as this object's grant (validity unknown until an extend)."""
        c = self._client
        held = _Held(self.lost)
        slot = ctypes.c_void_p()
        rc = c._f.redlock_sync_adopt(c._hd.enter(), self._names[0],
                                     len(self._names[0]), token,
                                     ctypes.byref(slot))
        if rc != 0:
            raise _error(c._f, rc, ("adopt", self))
        with self._mutex:
            held.ptr = slot.value   # no call between these
            slot.value = None
            self._held = held
            c._hd.held[held.id] = held

    def _cancel_now(self, acq: int) -> None:
        """Cancels the acquisition `acq` in C (if in flight now)."""
        self._cancel_id = acq
        c = self._client
        c._f.redlock_sync_cancel(c._hd.enter(), acq)

    def release(self) -> None:
        """Releases the lock on every master. Raises Lost when it was
        found gone (it had expired or was lost: the work done under it may
        not have been exclusive), NoQuorum when too few masters answered
        (the keys then expire by their ttl), ClientClosed when the client
        was closed (which released it). From a signal handler that
        interrupts this lock's own acquire() on the same thread, the
        acquisition is released as soon as it is recorded (acquire()
        then raises Lost)."""
        c = self._client
        f = c._f
        held = ptr = None
        called = False
        if c._hd.gen != _fork_generation:
            c._hd.enter()   # ClientClosed: the parent's (its busy may be
            #                 held by a thread of the parent's)
        try:
            with self._mutex:
                if self._held is None:
                    if self._acquiring == threading.get_ident():
                        self._abandon = True
                        return
                    raise RedlockError(f"{self.name!r} is not held",
                                       "ENOTHELD")
                held = self._held   # no call between these two
                self._held = None
                _lost_targets.pop(held.id, None)
                c._hd.held.pop(held.id, None)
                if held.event.is_set():
                    self._lost_reason = held.reason
            with held.busy:   # no call on the handle is in flight after it
                ptr, held.ptr = held.ptr, None
            if ptr is None:
                raise RedlockError(f"{self.name!r} is not held",
                                   "ENOTHELD")
            c._hd.enter()
            called = True   # no call between this and the release's
            rc = f.redlock_sync_release(ptr)
        except BaseException:
            # Taken from this object but not released in C (Ctrl-C, a
            # signal handler's exception): release it anyway, or it would
            # stay held and extended with nobody to release it. No call
            # before that release (another interrupt may land after any).
            if held is not None and not called and not c._hd.closed:
                p = ptr or held.ptr
                held.ptr = None
                if p:
                    f.redlock_sync_release(p)
            raise
        if rc != 0:
            raise _error(f, rc, ("release", self), {F.ENOTHELD: Lost})

    def extend(self, ttl: Optional[float] = None) -> None:
        """Extends the lock to ``ttl`` seconds from now (default: its ttl).
        Raises Lost when it is gone, NoQuorum."""
        ms = self._ttl_ms if ttl is None else _ms("ttl", ttl, 1)
        c = self._client
        held = self._held
        c._hd.enter()   # ClientClosed when closed or the parent's
        if held is None:
            raise RedlockError(f"{self.name!r} is not held", "ENOTHELD")
        with held.busy:
            ptr = held.ptr
            if ptr is None:
                raise RedlockError(f"{self.name!r} is not held", "ENOTHELD")
            c._call_on(("extend", self), c._f.redlock_sync_extend,
                       ptr, ms, classes={F.ENOTHELD: Lost, F.EEXPIRED: Lost})

    def _getter(self, fn: Any, *args: Any) -> Any:
        """fn(lock handle, *args), or None when not held (or closed).
        Waits for no acquisition (another thread's acquire(wait=...))."""
        held = self._held
        if held is None or self._client._hd.gen != _fork_generation:
            return None   # (a parent's lock: its busy may be held)
        with held.busy:
            ptr = held.ptr
            if ptr is None:
                return None
            try:
                self._client._hd.enter()
            except ClientClosed:
                return None
            return fn(ptr, *args)

    # -- state --

    def owned(self) -> bool:
        """Whether this object holds the lock now (redis-py's spelling):
        :attr:`held`, known here without a round trip (not lost, validity
        left)."""
        return self.held

    def locked(self) -> bool:
        """Whether anyone holds this lock now, this object or another
        owner (threading.Lock.locked(), redis-py's Lock.locked()): read
        from the masters (:meth:`Client.inspect`: a quorum holds it).
        Plain locks only."""
        if self._side is not None or self._multi or self._limit is not None:
            raise TypeError("locked() reads a plain lock; for a read-write "
                            "lock or a semaphore see Client.inspect or "
                            "Client.semaphore_status")
        return self._client.inspect(self._names[0]).held

    @property
    def held(self) -> bool:
        """True while acquired, not lost, and with validity left."""
        return (self._held is not None and not self.lost.is_set()
                and self.validity > 0)

    @property
    def validity(self) -> float:
        """Seconds the lock is still safe to use (0.0 when not held)."""
        v = self._getter(self._client._f.redlock_sync_validity_ms)
        return float(v) / 1000 if v else 0.0

    @property
    def fence(self) -> Optional[int]:
        """The fencing token of this grant (an int that increases across
        holders), or None without ``fence=True`` or when not held."""
        if not self._fence_wanted:
            return None
        v = self._getter(self._client._f.redlock_sync_fence)
        return v if v else None

    @property
    def token(self) -> Optional[str]:
        """This grant's random value (hex), or None when not held."""
        buf = ctypes.create_string_buffer(160)
        rc = self._getter(self._client._f.redlock_sync_token, buf, len(buf))
        return _decode(buf.value) if rc == 0 else None

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the lock was lost ("ENOTHELD": found gone or someone
        else's; "EEXPIRED": no extension in time; "ECANCELED": the
        client was closed, which released it), or None."""
        h = self._held
        if h is not None and h.event.is_set():
            return h.reason
        return self._lost_reason

    # -- context managers --

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(self, exc_type: Any, exc: Any,
                 tb: Any) -> "Literal[False]":
        was_lost = self.lost.is_set()
        try:
            self.release()
        except (Lost, ClientClosed):
            # Found gone, or the client was closed under the block (its
            # close released the lock: someone else may hold it now).
            was_lost = True
        except NoQuorum:
            pass   # the keys expire by their ttl
        if was_lost and exc_type is None:
            raise Lost(f"{self.name!r} was lost while the block ran "
                       f"({self.lost_reason or 'gone at the release'})",
                       self.lost_reason or "ENOTHELD")
        return False

    async def __aenter__(self) -> "Lock":
        await _in_thread(self.acquire, undo=_release_quietly,
                         cancel=self._cancel_acquisition)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        r: bool = await _in_thread(
            lambda: self.__exit__(exc_type, exc, tb))
        return r

    async def aacquire(self) -> "Lock":
        """acquire() on a worker thread (the event loop never blocks). A
        task cancelled while it waits cancels the acquisition."""
        lock: Lock = await _in_thread(self.acquire, undo=_release_quietly,
                                      cancel=self._cancel_acquisition)
        return lock

    def _cancel_acquisition(self, done: Callable[[], bool]) -> None:
        """Cancels this object's acquisition in flight (for a task that is
        gone), by its id (the C call's lost_arg), until it has returned:
        the C call may not have reached the library's loop yet."""
        c = self._client
        while not done():
            acq = self._acq_id
            if acq is not None and self._acquiring is not None:
                self._cancel_id = acq   # a sliced wait stops there
                try:
                    if c._f.redlock_sync_cancel(c._hd.enter(), acq) > 0:
                        return
                except ClientClosed:
                    return
            time.sleep(0.005)

    async def arelease(self) -> None:
        """release() on a worker thread."""
        await _in_thread(self.release)

    def __del__(self) -> None:
        # A held lock that nobody can release any more: release it rather
        # than extend it for as long as the process lives.
        try:
            if self._held is not None and self._held.ptr is not None:
                self.release()
        except Exception:
            pass


def _release_taken(f: Any, slot: Any) -> None:
    """Releases a grant nobody will record (its caller was interrupted)."""
    ptr = _take(slot)
    if ptr:
        f.redlock_sync_release(ptr)


def _release_quietly(lock: Lock) -> None:
    try:
        lock.release()
    except RedlockError:
        pass


class Semaphore(Lock):
    """A counting semaphore: at most ``limit`` holders of its name at once
    (:meth:`Client.semaphore`). Each of its ``limit`` permits is a mutex
    (``{name}:sem:<i>``), so this is a :class:`Lock` in every other
    respect: ``with`` / ``async with``, ``lost``, ``validity``,
    ``fence`` (per permit), ``token``, the same thread, signal, fork and
    asyncio rules. Acquiring with another limit than the masters' raises
    :class:`LimitMismatch`."""

    @property
    def limit(self) -> Optional[int]:
        """The limit this object acquires with."""
        return self._limit

    @property
    def permit(self) -> Optional[int]:
        """The permit held (0..limit-1), or None when not held."""
        v = self._getter(self._client._f.redlock_sync_permit)
        return v if v is not None and v >= 0 else None

    def __repr__(self) -> str:
        state = (f"holding permit {self.permit}" if self._held is not None
                 else "not held")
        return (f"<libredlock.Semaphore {self.name!r} limit {self._limit} "
                f"{state}>")


@dataclass(frozen=True)
class PermitStatus:
    index: int
    holder: str      # the token most masters hold there
    masters: int     # how many masters hold it
    held: bool       # by a quorum: the permit is taken
    ttl: float       # seconds: held, until fewer than a quorum hold it
    holder_id: Optional[str] = None   # the holder part of that token


@dataclass(frozen=True)
class SemaphoreStatus:
    limit: int       # the limit a quorum holds; 0 when none
    limit_max: int   # the largest limit a master holds
    held: int        # permits held by a quorum
    free: int        # permits below limit not held by a quorum
    permits: Tuple[PermitStatus, ...]   # every permit some master holds

    @classmethod
    def _from(cls, info: Any) -> "SemaphoreStatus":
        return cls(info.limit, info.limit_max, info.held, info.free,
                   tuple(PermitStatus(p.index, _decode(p.holder), p.masters,
                                      bool(p.held), p.pttl_ms / 1000,
                                      token_holder(_decode(p.holder)))
                         for p in (info.permits[i]
                                   for i in range(info.n_permits))))


class RWLock:
    """Both sides of a read-write lock: many readers or one writer."""

    def __init__(self, client: Client, name: bytes) -> None:
        self._client = client
        self._name = name

    def read(self, ttl: float = 30, wait: Optional[float] = None, **kw: Any
        ) -> Lock:
        """A shared (read) lock; the same options as Client.lock except
        fence and heal."""
        return self._side(F.READ, ttl, wait, kw)

    def write(self, ttl: float = 30, wait: Optional[float] = None, **kw: Any
        ) -> Lock:
        """The exclusive (write) lock."""
        return self._side(F.WRITE, ttl, wait, kw)

    def _side(self, side: int, ttl: float, wait: Optional[float],
              kw: Dict[str, Any]) -> Lock:
        bad = set(kw) - {"auto_extend", "lost_margin", "retry_count",
                         "retry_delay", "retry_jitter", "holder"}
        if bad:
            raise TypeError(f"unexpected option(s) {sorted(bad)}")
        return Lock(self._client, [self._name], side, ttl, wait, False,
                    kw.get("auto_extend", True), kw.get("lost_margin"),
                    False, kw.get("retry_count"), kw.get("retry_delay"),
                    kw.get("retry_jitter"), holder=kw.get("holder"))


# --- elections -------------------------------------------------------------------

class Election:
    """This instance's campaign for a leadership (Client.campaign).

    ``is_leader``: whether it leads now; ``deposed`` (a threading.Event)
    is set when it stops leading (its lock could not be extended, or was
    found gone); ``resign()`` (also at the end of a ``with`` block) gives
    the leadership up at once: standbys hear the release."""

    def __init__(self, client: Client, name: bytes, id: str, ttl: float,
                 once: bool, step_down: Optional[float]) -> None:
        self._client = client
        self._name = name
        self._identity = _cstr("id", id)
        if self._identity is None:
            raise TypeError("id must be a str")
        self.id = id
        o = F.ElectionOpts()
        o.ttl_ms = _ttl_ms("ttl", ttl, client._command_timeout_ms)
        if step_down is not None:
            o.step_down_ms = _ms("step_down", step_down, 1)
        else:   # the C default (ttl/10, at least 2 command timeouts),
            # kept below half the ttl for short ttls
            o.step_down_ms = _default_margin(o.ttl_ms,
                                             client._command_timeout_ms)
        if not isinstance(once, bool):
            raise TypeError("once must be True or False")
        o.once = 1 if once else 0
        self._id = next(_ids)
        o.on_change = _c_callback(F.ELECTION_CB,
                                  "redlock_sync_queue_election")
        o.arg = self._id
        self._opts = o
        self._h: Optional[int] = None
        # Held around a call on the handle (short); reentrant: a signal
        # handler may resign() on a thread inside is_leader.
        self._mutex = threading.RLock()
        self.deposed = threading.Event()
        self.deposed_reason: Optional[str] = None

    @property
    def name(self) -> str:
        return _decode(self._name)

    def _campaign(self, wait: Optional[float]) -> None:
        c = self._client
        f = c._f
        if wait is None or (not isinstance(wait, bool) and
                            isinstance(wait, (int, float)) and
                            (wait == -1 or wait == math.inf)):
            wait_ms = 0   # until elected
        else:
            wait_ms = _ms("wait", wait, 1)

        slot = ctypes.c_void_p()   # the election, written by the C call

        def run(stopped: Callable[[], bool]) -> Optional[RedlockError]:
            # On a worker when called on the main thread: the C error and
            # result are read on the thread that called.
            rc = self._campaign_once(wait_ms, slot)
            return _error(f, rc, ("campaign", self)) if rc != 0 else None

        def give_up() -> None:   # elected for a caller that was interrupted
            h = _take(slot)
            if h:
                f.redlock_sync_resign(h)

        _election_targets[self._id] = self
        try:
            # A standby's Ctrl-C: redlock_sync_cancel finds the campaign
            # by its opts.arg (this election's id).
            err = _blocking(
                run, lambda: f.redlock_sync_cancel(c._hd.enter(), self._id),
                give_up)
            if err is not None:
                raise err
            with self._mutex:
                self._h = slot.value   # no call between these two
                slot.value = None
        except BaseException:
            h = slot.value   # elected, not recorded: resign it (first)
            slot.value = None
            if h:
                f.redlock_sync_resign(h)
            _election_targets.pop(self._id, None)
            raise
        c._hd.elections[self._id] = self

    def _campaign_once(self, wait_ms: int, slot: Any) -> int:
        """The C campaign (this frame is where a standby waits)."""
        c = self._client
        return int(c._f.redlock_sync_campaign(
            c._hd.enter(), self._name, len(self._name), self._identity,
            ctypes.byref(self._opts), wait_ms, ctypes.byref(slot)))

    @property
    def is_leader(self) -> bool:
        c = self._client
        with self._mutex:
            if self._h is None:
                return False
            try:
                c._hd.enter()
            except ClientClosed:
                return False
            return bool(c._f.redlock_sync_is_leader(self._h))

    def resign(self) -> None:
        """Stops leading (and campaigning); standbys take over at once.
        Idempotent."""
        c = self._client
        with self._mutex:
            h, self._h = self._h, None
            _election_targets.pop(self._id, None)
            if h is None:
                return
            c._hd.elections.pop(self._id, None)
            try:
                c._call_on(("resign", self), c._f.redlock_sync_resign,
                           h)
            except ClientClosed:
                pass

    async def aresign(self) -> None:
        """resign() on a worker thread."""
        await _in_thread(self.resign)

    def __enter__(self) -> "Election":
        return self

    def __exit__(self, *exc: object) -> "Literal[False]":
        self.resign()
        return False

    def __repr__(self) -> str:
        return (f"<libredlock.Election {self.name!r} id={self.id!r} "
                f"{'leading' if self._h is not None else 'resigned'}>")


# --- stats -------------------------------------------------------------------------

@dataclass(frozen=True)
class MasterStats:
    """Counters of one master; latencies in seconds (from the log-linear
    histogram: upper bounds of buckets)."""
    server: str
    up: bool
    commands: int
    replies: int
    server_errors: int
    timeouts: int
    conn_failures: int
    connects: int
    guard_refusals: int
    latency_p50: float
    latency_p99: float


class Stats:
    """A snapshot of Client.stats(): counters of acquisitions and their
    outcomes, per-master counters (``masters``), and ``prometheus``, the
    same in the Prometheus text format (as ``redlock stats``)."""

    FIELDS = ("attempts", "grants", "taken", "noquorum", "expired",
              "acquire_timeouts", "canceled", "extensions",
              "extension_failures", "lost", "releases", "quorum")

    attempts: int
    grants: int
    taken: int
    noquorum: int
    expired: int
    acquire_timeouts: int
    canceled: int
    extensions: int
    extension_failures: int
    lost: int
    releases: int
    quorum: int

    def __init__(self, f: Any, st: Any) -> None:
        for k in self.FIELDS:
            setattr(self, k, getattr(st, k))
        ms: List[MasterStats] = []
        for i in range(st.n_masters):
            m = st.masters[i]
            def q(p: float, m: Any = m) -> float:
                return float(f.redlock_hist_quantile_us(m.latency_hist, p))\
                    / 1e6
            ms.append(MasterStats(
                _decode(m.server), bool(m.up), m.commands, m.replies,
                m.server_errors, m.timeouts, m.conn_failures, m.connects,
                m.guard_refusals, q(0.5), q(0.99)))
        self.masters: Sequence[MasterStats] = tuple(ms)
        n = f.redlock_stats_prometheus(ctypes.byref(st), None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        f.redlock_stats_prometheus(ctypes.byref(st), buf, len(buf))
        self.prometheus: str = _decode(buf.value)

    def __repr__(self) -> str:
        return (f"<libredlock.Stats grants={self.grants} "
                f"attempts={self.attempts} masters={len(self.masters)}>")
