"""Test support: redis-server masters on loopback, owned by PID, and every
other process a test starts; bounded waiting.

Every process is started through `setpriv --pdeathsig KILL` (util-linux,
Essential in Debian) from the test's main thread: if pytest itself dies
(a timeout's SIGKILL), the kernel kills them too. Otherwise they are killed
by PID when their fixture ends, pass or fail, and at exit.
"""
import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
SETPRIV = shutil.which("setpriv")

_owned = {}   # pid -> Popen


def _kill_all():
    for pid, p in list(_owned.items()):
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=5)
        except Exception:
            pass
        _owned.pop(pid, None)


atexit.register(_kill_all)


def _on_term(signum, frame):
    _kill_all()
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _on_term)


def spawn(argv, **kw):
    """Starts argv as our child (killed with us); returns the Popen.
    It gets its own process group so that signals for it (SIGSTOP) reach
    it alone; we stop it by PID."""
    if "LD_PRELOAD" in os.environ and argv[0] != sys.executable:
        # A sanitizer's runtime preloaded for the library (run.sh) is for
        # the Python processes only, not for redis-server or node.
        env = dict(kw.pop("env", None) or os.environ)
        env.pop("LD_PRELOAD", None)
        kw["env"] = env
    if SETPRIV:
        argv = [SETPRIV, "--pdeathsig", "KILL", "--"] + list(argv)
    p = subprocess.Popen(argv, start_new_session=True, **kw)
    _owned[p.pid] = p
    return p


def stop(p, sig=signal.SIGKILL, timeout=10):
    """Stops one process we started, by PID, and reaps it."""
    if p.poll() is None:
        try:
            os.kill(p.pid, signal.SIGCONT)
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=timeout)
    _owned.pop(p.pid, None)


def wait_for(cond, timeout, what, interval=0.005):
    """Polls cond() until true, at most timeout seconds; fails the test
    with `what` otherwise. Returns cond()'s value."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for "
                                 f"{what}")
        time.sleep(interval)


def inside(thread, *functions):
    """Whether `thread` runs one of `functions` (names) now: its innermost
    Python frame, which is the caller of a ctypes call that waits in the
    library (the binding counts no threads in and out: issue 35)."""
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and frame.f_code.co_name in functions


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A port free now, below the kernel's ephemeral range (a released
    port inside it can become some client's source port before the server
    binds it), random so that parallel runs rarely pick the same."""
    lo = _ephemeral_low()
    rnd = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(64):
        port = rnd.randrange(10000, max(lo, 10001))
        # 17000-17999: the bus ports of clusters on fixed ports (the
        # compose kit's drill runs beside this suite in CI), as
        # harness_free_port
        if port in (6379, 26379, 26380, 26381) or 17000 <= port < 18000:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _encode(args):
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += f"${len(a)}\r\n".encode() + a + b"\r\n"
    return out


def command(port, *args, password=None, timeout=2.0):
    """One Redis command over a plain socket (RESP); its decoded reply
    (errors raise RuntimeError)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        f = s.makefile("rb")
        if password:
            s.sendall(_encode(("AUTH", password)))
            _read(f)
        s.sendall(_encode(args))
        return _read(f)


def _read(f):
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data.decode("utf-8", "replace")
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise RuntimeError(f"bad reply {line!r}")


class Master:
    """One redis-server on 127.0.0.1, in a private directory."""

    def __init__(self, workdir, durable=False, password=None, tls=None):
        self.dir = tempfile.mkdtemp(prefix="master-", dir=workdir)
        self.durable = durable
        self.password = password
        self.tls = tls   # a directory made by make_certs: TLS only
        self.port = None
        self.proc = None
        self.paused = False

    @property
    def addr(self):
        if self.tls:
            return f"rediss://127.0.0.1:{self.port}"
        return f"127.0.0.1:{self.port}"

    def start(self):
        for attempt in range(5):
            if self.port is None or attempt > 0 and self.proc is None:
                self.port = free_port()
            if self._spawn():
                return
            if self.proc is not None:
                stop(self.proc)
                self.proc = None
        raise AssertionError(f"redis-server did not start; log:\n"
                             f"{self.log_tail()}")

    def _spawn(self):
        if self.tls:
            t = self.tls
            port = ["--port", "0", "--tls-port", str(self.port),
                    "--tls-cert-file", f"{t}/server.crt",
                    "--tls-key-file", f"{t}/server.key",
                    "--tls-ca-cert-file", f"{t}/ca.crt",
                    "--tls-auth-clients", "no"]
        else:
            port = ["--port", str(self.port)]
        argv = [REDIS] + port + ["--bind", "127.0.0.1",
                "--save", "", "--dir", self.dir, "--daemonize", "no",
                "--protected-mode", "no", "--enable-debug-command", "local",
                "--appendonly", "yes" if self.durable else "no"]
        if self.durable:
            argv += ["--appendfsync", "always"]
        if self.password:
            argv += ["--requirepass", self.password]
        log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = spawn(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.paused = False
        end = time.monotonic() + 5
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                _owned.pop(self.proc.pid, None)
                self.proc = None
                return False
            if self.tls:
                if _listening(self.port):
                    return True
            else:
                try:
                    if self.cmd("PING") == "PONG":
                        return True
                except (OSError, RuntimeError) as e:
                    if "NOAUTH" in str(e):
                        return True
            time.sleep(0.002)
        return False

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, "redis.log"), "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def cmd(self, *args, timeout=2.0):
        return command(self.port, *args, password=self.password,
                       timeout=timeout)

    def pause(self):
        """SIGSTOP; returns once the kernel shows it stopped."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True
        wait_for(lambda: _state(self.proc.pid) == "T", 5,
                 f"redis-server {self.proc.pid} to stop")

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def kill(self):
        stop(self.proc)
        self.proc = None

    def restart(self):
        """kill -9, then the same port again (without persistence the keys
        are gone; with appendfsync always they are reloaded)."""
        if self.proc is not None:
            self.kill()
        end = time.monotonic() + 5
        while not self._spawn():
            if self.proc is not None:
                stop(self.proc)
                self.proc = None
            if time.monotonic() > end:
                raise AssertionError(f"could not restart :{self.port}\n"
                                     f"{self.log_tail()}")
            time.sleep(0.02)

    def close(self):
        if self.proc is not None:
            stop(self.proc)
            self.proc = None


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def make_certs(d):
    """A test CA, a server certificate for 127.0.0.1 signed by it, and an
    unrelated CA (openssl CLI). Returns d."""
    script = """set -e
mk_ca() { openssl req -x509 -newkey rsa:2048 -nodes -days 2 \
  -subj "/CN=$1" -keyout $2.key -out $2.crt; }
mk_ca 'redlock python test CA' ca
mk_ca 'another CA' other-ca
openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
  -keyout server.key -out server.csr
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key \
  -CAcreateserial -days 2 -extfile server.ext -out server.crt
chmod 600 *.key
"""
    subprocess.run(["sh", "-c", script], cwd=d, check=True,
                   capture_output=True, timeout=60)
    return d


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
        return data[data.rindex(")") + 2]
    except (OSError, ValueError, IndexError):
        return ""


class Masters(list):
    """N masters, started together; .addrs for a Client."""

    def __init__(self, n, workdir, durable=False, password=None, tls=None):
        super().__init__(Master(workdir, durable, password, tls)
                         for _ in range(n))
        try:
            for m in self:
                m.start()
        except BaseException:
            self.close()
            raise

    @property
    def addrs(self):
        return [m.addr for m in self]

    def close(self):
        for m in self:
            m.close()

    def holding(self, key, token):
        """How many masters hold key with token."""
        n = 0
        for m in self:
            try:
                if m.cmd("GET", key) == token:
                    n += 1
            except (OSError, RuntimeError):
                pass
        return n
