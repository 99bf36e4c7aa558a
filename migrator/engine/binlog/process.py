"""The reader process: :class:`~migrator.engine.binlog.reader.TxnReader` over a dump connection of
its own, sending decoded transactions to its parent through a pipe.

Catch-up's :class:`~migrator.engine.catch_up.tailer.Tailer` starts it with :func:`start_reader`
(a fresh interpreter running this module, ``python -m migrator.engine.binlog.process``) so
reading and decoding never wait for the target's commits. It dies with its parent
(``PR_SET_PDEATHSIG``), and reports an error as a message before it exits.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migrator.engine.binlog import client as bl
from migrator.engine.binlog.messages import Failure, Format, Shapes, Tick, Txns
from migrator.engine.binlog.reader import Committed, ReaderError, TxnReader
from migrator.fleet.gtid import format_pos, format_state

if TYPE_CHECKING:
    from migrator.fleet.tls import MySQLTLS


@dataclass
class ReaderSpec:
    """Everything the reader process needs (sent over the spawn pipe, never on a command line)."""

    host: str
    port: int
    user: str
    password: str
    start: str
    schemas: tuple[str, ...]
    tables: tuple[str, ...] | None
    heartbeat_s: float = 0.25
    message_changes: int = 2000
    message_s: float = 0.02
    tick_s: float = 0.1
    #: row changes of one transaction held at most (the rest goes on as parts, or to disk): the memory
    #: bound; 0: ``MIGRATOR_CATCHUP_PART_CHANGES`` as the reader process finds it (else 5,000)
    part_changes: int | None = 0
    #: bytes of row events whose changes one transaction holds at most (the same, in bytes: a wide row
    #: counts as what it is); 0: ``MIGRATOR_CATCHUP_PART_BYTES`` as the reader process finds it (else 32 MiB)
    part_bytes: int | None = 0
    #: a message ends once its transactions came from this many bytes of row events (or ``message_changes``
    #: row changes); 0: the part byte bound
    message_bytes: int = 0
    #: the source's TLS settings (paths; the process builds its own context from them)
    tls: MySQLTLS | None = None
    #: forward rows events whole, only their keys decoded (the fast apply path: :mod:`.forward`); an event
    #: of more than ``raw_max`` bytes (0: no limit) is decoded as usual
    raw: bool = False
    raw_max: int = 0


def run_reader(spec: ReaderSpec, conn: Any) -> None:
    """Entry point of the reader process: read, decode and send batches until told to stop.

    Messages sent (:mod:`.messages`): :class:`Shapes` before the transactions that use them,
    :class:`Txns` (a list of transactions, never empty, ending at a transaction with statements
    if it holds one), :class:`Tick` when idle, :class:`Failure` before exiting on an error. A
    transaction over ``part_changes`` row changes goes in parts (``partial`` set), each a
    :class:`Txns` of its own whose position is still before the transaction: the applier commits
    it, the checkpoint stays put. The parent's only message is ``"stop"`` (or closing the pipe).
    """
    _die_with_parent()
    client = None
    try:
        client = bl.BinlogClient(spec.host, spec.port, spec.user, spec.password, spec.start,
                                 heartbeat_s=spec.heartbeat_s, tls=spec.tls, raw=spec.raw)
        rd = TxnReader(spec.start, spec.schemas, spec.tables, part_changes=spec.part_changes,
                       part_bytes=spec.part_bytes, raw=spec.raw, raw_max=spec.raw_max, checksum=client.checksum)
        message_bytes = spec.message_bytes or rd.part_bytes or 0
        txns: list[Committed] = []
        nchanges = nbytes = 0
        started = last_tick = time.monotonic()
        polls = 0
        sent = ""  # the last position sent
        ended = 0  # transactions read when the dump socket was last looked at
        for ev in client.events():
            txn = rd.feed(ev)
            if rd.new_format:
                rd.new_format = False
                conn.send(Format(rd.format, rd.checksum))
            if rd.new_shapes:
                conn.send(Shapes(rd.take_shapes()))
            for part in rd.take_parts():
                if not part.partial:  # the end of a transaction that had spilled: as any end
                    if not txns:
                        started = time.monotonic()
                    txns.append(part)
                    nchanges += len(part.changes) + len(part.statements)
                    if part.statements:  # a message ends at a statement (the tailer's barrier relies on it)
                        sent = format_pos(rd.position)
                        conn.send(Txns(txns, sent, rd.last_ts, time.monotonic(), format_state(rd.seen)))
                        txns, nchanges, nbytes = [], 0, 0
                    continue
                # a part of a transaction over the memory bound: what came before goes first, then the
                # part alone (its position is still before its transaction)
                now = time.monotonic()
                if txns:
                    sent = format_pos(rd.position)
                    conn.send(Txns(txns, sent, rd.last_ts, now, format_state(rd.seen)))
                    txns, nchanges, nbytes = [], 0, 0
                conn.send(Txns([part], format_pos(rd.position), rd.last_ts, now, format_state(rd.seen)))
                del part  # sent: not held while the next one is read
                last_tick = now
            if txn is not None:
                if not txns:
                    started = time.monotonic()
                txns.append(txn)
                nchanges += len(txn.changes) + len(txn.statements)
                nbytes += txn.size
            now = time.monotonic()
            # the master went quiet after a transaction (a cutover's fence, a lull): send what is held
            # now, not at the next event or heartbeat (up to heartbeat_s later: a drain under the fence
            # waited for it). Looked at once per transaction, not per row event
            quiet = False
            if rd.transactions_read != ended:
                ended = rd.transactions_read
                quiet = client.drained()
            if txns and (nchanges >= spec.message_changes or now - started >= spec.message_s or quiet
                          or ev.type == bl.HEARTBEAT or txn is not None and txn.statements
                          or message_bytes and nbytes >= message_bytes):
                sent = format_pos(rd.position)
                conn.send(Txns(txns, sent, rd.last_ts, now, format_state(rd.seen)))
                txns, nchanges, nbytes = [], 0, 0
                last_tick = now
            elif not txns and (now - last_tick >= spec.tick_s or quiet):
                pos = format_pos(rd.position)
                if pos != sent or now - last_tick >= spec.tick_s:
                    sent = pos
                    conn.send(Tick(pos, rd.last_ts, format_state(rd.seen)))
                    last_tick = now
            polls += 1
            if polls >= 512 or ev.type == bl.HEARTBEAT:
                polls = 0
                if conn.poll():
                    msg = conn.recv()
                    if msg == "stop":
                        return
    except (bl.BinlogError, ReaderError) as exc:
        _send_error(conn, str(exc), getattr(exc, "code", None))
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        return
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        _send_error(conn, f"{type(exc).__name__}: {exc}", None)
    finally:
        if client is not None:
            client.close()


class _Pipe:
    """Both directions of a reader-process pipe as one object with send/recv/poll/close."""

    def __init__(self, rfd: int, wfd: int):
        from multiprocessing.connection import Connection

        self._r = Connection(rfd, writable=False)
        self._w = Connection(wfd, readable=False)

    def send(self, obj: Any) -> None:
        self._w.send(obj)

    def recv(self) -> Any:
        """One message, read into one buffer of its size. (multiprocessing's reader asks the pipe for
        everything still missing at each of its 64 KiB reads, allocating that much every time: a
        32 MiB message of wide rows cost 512 allocations of up to 32 MiB, and a buffer grown twice.)"""
        fd = self._r.fileno()
        (size,) = struct.unpack("!i", _read_exact(fd, 4))
        if size == -1:  # multiprocessing's header of a message of 2 GiB or more
            (size,) = struct.unpack("!Q", _read_exact(fd, 8))
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = os.readv(fd, [view[got:]])
            if n == 0:
                raise EOFError("the reader process closed its pipe mid-message")
            got += n
        del view
        return pickle.loads(buf)

    def poll(self, timeout: float = 0.0) -> bool:
        return self._r.poll(timeout)

    @property
    def reader(self) -> Any:
        """The receiving end, for :func:`multiprocessing.connection.wait` beside other handles."""
        return self._r

    def close(self) -> None:
        for c in (self._r, self._w):
            try:
                c.close()
            except OSError:
                pass


def _read_exact(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError  # the other end closed: as multiprocessing's Connection.recv
        data += chunk
    return data


#: glibc's mallopt parameter: allocations of at least this many bytes get pages of their own
M_MMAP_THRESHOLD = -3
#: the threshold catch-up's processes set (glibc's default starts at 128 KiB and rises to 32 MiB)
LARGE_BLOCK = 1 << 20


def return_large_blocks() -> bool:
    """Make glibc give every block of ``LARGE_BLOCK`` bytes or more pages of its own, handed back to
    the system when freed; True when set. glibc raises its threshold each time such a block is freed
    (up to 32 MiB), and from then on keeps wide rows' text in the heap, where the freed space stays
    resident (measured: docs/performance.md, "Memory: one transaction of any size"). Left alone where
    the operator set ``MALLOC_MMAP_THRESHOLD_`` or the C library is not glibc."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    try:
        import ctypes

        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK))
    except (OSError, AttributeError):  # no mallopt: not glibc
        return False


def start_reader(spec: ReaderSpec) -> tuple[Any, _Pipe]:
    """Start the reader process (a fresh interpreter running this module) and send it ``spec``.

    A plain subprocess rather than multiprocessing's spawn: spawn re-imports the
    parent's ``__main__`` (an RQ worker, the CLI, pytest) in the child. The spec,
    credentials included, goes through the pipe, never the command line or environment.
    """
    import subprocess
    import sys

    return_large_blocks()  # this process applies what the reader sends: wide rows pass through it
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen([sys.executable, "-m", __name__, str(to_child_r), str(to_parent_w)],
                            pass_fds=(to_child_r, to_parent_w), close_fds=True, env=env, stdin=subprocess.DEVNULL)
    os.close(to_child_r)
    os.close(to_parent_w)
    pipe = _Pipe(to_parent_r, to_child_w)
    pipe.send(spec)
    return proc, pipe


def main(argv: list[str]) -> None:
    return_large_blocks()
    pipe = _Pipe(int(argv[1]), int(argv[2]))
    try:
        spec = pipe.recv()
    except EOFError:
        return
    run_reader(spec, pipe)


def _send_error(conn: Any, message: str, code: int | None) -> None:
    try:
        conn.send(Failure(message, code))
    except Exception:  # noqa: BLE001 - the parent is gone
        pass


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (a kill -9 of the worker leaves no orphan)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(1)
    except Exception:  # noqa: BLE001 - not Linux: the closed pipe still ends us
        pass


if __name__ == "__main__":
    # run as `python -m <this module>`: import it under its real name, so what it
    # pickles (Shape, Txn...) unpickles in the parent as the same classes
    import importlib
    import sys

    importlib.import_module(__spec__.name).main(sys.argv)
