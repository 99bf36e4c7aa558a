"""The processes of a sandbox: what it records about each, and how it finds and stops them.

Runs in whatever process drives the sandbox (``migrator sandbox``, the test
session, the demo). A process is identified by its pid *and* by a marker in its
command line (its data dir, or redis's host:port), so a recycled pid is never
signalled: the sandbox only ever stops what it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from migrator.errors import SandboxError

ZK_JAR_DIR = Path("/usr/share/java")


@dataclass
class Proc:
    """One process the sandbox started."""

    name: str
    kind: str  # mariadb | zookeeper | redis
    port: int
    pid: int | None = None
    datadir: str = ""
    server_id: int | None = None
    partner: str | None = None
    offset: int | None = None
    spare: bool = False

    @property
    def marker(self) -> str:
        """What this process's command line shows: redis-server rewrites its title to host:port."""
        return f"127.0.0.1:{self.port}" if self.kind == "redis" else self.datadir

    def alive(self) -> bool:
        return pid_alive(self.pid, self.marker)


@dataclass
class SandboxState:
    dir: str
    base_port: int
    pairs: int
    spare_pairs: int
    shards: int
    rows: int
    procs: dict[str, Proc] = field(default_factory=dict)
    seeded: bool = False
    #: MariaDB with TLS only (require_secure_transport); False for a state written before it existed
    tls: bool = False
    #: how the servers' GTID domains are laid out (:data:`migrator.sandbox.GTID_LAYOUTS`)
    gtid_layout: str = "per-server"
    #: ``slave_parallel_threads`` of every pair link (0: one SQL thread)
    parallel_threads: int = 0

    def to_json(self) -> str:
        d = asdict(self)
        return json.dumps(d, indent=2)

    @classmethod
    def from_json(cls, text: str) -> SandboxState:
        d = json.loads(text)
        procs = {k: Proc(**v) for k, v in d.pop("procs").items()}
        return cls(**d, procs=procs)


def read_state(path: Path) -> SandboxState:
    """The sandbox state file at ``path``; one clear error when it is not one (truncated, edited, or
    some other program's ``state.json``)."""
    try:
        return SandboxState.from_json(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SandboxError(f"{path} is not a sandbox state file this tool can read ({why}): if its processes "
                           "still run, stop them by hand; then remove the directory, or start a new sandbox in "
                           "another --dir") from None


def pid_alive(pid: int | None, marker: str = "") -> bool:
    """True if ``pid`` runs and (when given) its command line mentions ``marker``.

    The marker (our data dir) guards against a recycled pid: we never signal a
    process we did not start.
    """
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        if marker:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker not in cmdline:
                return False
    except OSError:
        return False
    return True


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def find_base_port(count: int, start: int = 20000, stop: int = 32700, step: int = 100) -> int:
    """A base port with ``count`` consecutive free ports (tests use this).

    Starts at a random slot so concurrent test sessions rarely race for one range.
    The range stays below Linux's ephemeral ports (32768 and up by default): there
    a client connection's local port can take a port the sandbox means to listen
    on later (a pair added to a running sandbox found its port so taken).
    """
    import random

    slots = list(range(start, stop, step))
    first = random.randrange(len(slots))
    for base in slots[first:] + slots[:first]:
        if all(port_free(base + i) for i in range(count)):
            return base
    raise SandboxError("no free port range found for a sandbox")


def stop_pid(pid: int, *, timeout: float = 30, marker: str = "") -> None:
    if not pid_alive(pid, marker):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not reap(pid, timeout):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        reap(pid, 10)


def reap(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` for ``pid`` to exit (reaping it when it is our child); False if it still runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return True
        except ChildProcessError:
            pass
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def four_letter(port: int, cmd: str, timeout: float = 1.0) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(cmd.encode())
            chunks = []
            while True:
                b = s.recv(4096)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks).decode(errors="replace").strip()
    except OSError:
        return ""


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            answer = s.recv(64)
            return answer.startswith(b"+PONG") or answer.startswith(b"-NOAUTH")  # up, and wants its password
    except OSError:
        return False


def check_binaries() -> None:
    missing = [b for b in ("mariadbd", "mariadb-install-db", "redis-server", "java") if not shutil.which(b)]
    if not (ZK_JAR_DIR / "zookeeper.jar").exists():
        missing.append("zookeeper (Debian package)")
    if missing:
        raise SandboxError(
            f"missing: {', '.join(missing)}; run scripts/setup "
            "(apt-get install mariadb-server zookeeper redis-server default-jre-headless)"
        )
