"""Benchmark: framing the binlog dump stream, the client's own framer vs PyMySQL's packet reader.

    python -m bench.framing [--sandbox DIR] [--seconds 10] [--repeat 5]

sysbench ``oltp_write_only`` writes into ``db00002`` on MySQL001A for ``--seconds``; then the same
binlog range (the first ``N`` events from the start position, N counted once, untimed) is read
``--repeat`` times by each side, interleaved (the order alternates from one run to the next):

- **framer**: :meth:`migrator.engine.binlog.client.BinlogClient.events` (reads up to 1 MiB at a time
  from the connection's buffered socket, one copy per event);
- **pymysql**: the same client, its events cut by PyMySQL's ``Connection._read_packet`` (two reads, a
  packet object and a join per packet), with the same CRC32 check and the same :class:`Event` per
  event: what the client did before it framed the stream itself.

Both sides open a new dump connection per run (not timed) and count the same events. Prints every run,
then the medians; the last line is ``framer_events_per_s=... pymysql_events_per_s=...
framer_vs_pymysql=... framer_cpu_us_per_event=... pymysql_cpu_us_per_event=... load_avg_before=...
load_avg_after=...`` (CPU time of this process while it reads; the 1-minute load averages before the
bench started its servers and at its end). Not a test: numbers vary with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql

from bench import sysbench
from migrator.engine.binlog.client import HEARTBEAT, BinlogClient, BinlogError, Event
from migrator.fleet import mysql
from migrator.fleet.model import even_layout
from migrator.sandbox import Sandbox, find_base_port, reset_fleet

SOURCE, DB = "MySQL001A", "db00002"


def pymysql_events(client: BinlogClient) -> Iterator[Event]:
    """The baseline: events framed by PyMySQL's packet reader, checked and built as the client does."""
    read = client.conn._read_packet
    checksum = client._checksum
    crc = zlib.crc32
    while True:
        try:
            pkt = read()
        except pymysql.err.MySQLError as exc:
            raise BinlogError(f"reading the binlog failed: {exc.args[-1] if exc.args else exc}") from None
        data = pkt._data
        if data[0] == 0xFE and len(data) < 9:
            raise BinlogError("the master ended the binlog dump")
        ts, etype, sid, _size, _pos, flags = struct.unpack_from("<IBIIIH", data, 1)
        if checksum:
            body_end = len(data) - 4
            if etype != HEARTBEAT and crc(data[1:body_end]) != struct.unpack_from("<I", data, body_end)[0]:
                raise BinlogError(f"binlog event of type {etype} failed its CRC32 check")
        else:
            body_end = len(data)
        yield Event(etype, ts, sid, flags, data[20:body_end])


def read_n(open_client: Callable[[], BinlogClient], frame: Callable[[BinlogClient], Iterator[Event]],
           n: int) -> tuple[float, float]:
    """Wall and CPU seconds to read ``n`` events (the connection opened before the clock starts)."""
    client = open_client()
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        got = 0
        for ev in frame(client):
            if ev.type == HEARTBEAT:
                raise RuntimeError(f"the master went idle after {got} of {n} events")
            got += 1
            if got == n:
                break
        return time.perf_counter() - t0, time.process_time() - c0
    finally:
        client.close()


def count_events(open_client: Callable[[], BinlogClient]) -> int:
    """Events from the start position until the master goes idle (its first heartbeat)."""
    client = open_client()
    try:
        n = 0
        for ev in client.events():
            if ev.type == HEARTBEAT:
                return n
            n += 1
    finally:
        client.close()
    raise AssertionError("unreachable")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sandbox", default=os.environ.get("MIGRATOR_BENCH_SANDBOX"))
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="migrator-bench-framing-"))
    own = args.sandbox is None
    sb = Sandbox(args.sandbox or tmp / "sandbox")
    runs: dict[str, list[tuple[float, float]]] = {"framer": [], "pymysql": []}
    try:
        if not sb.running():
            sb.up(pairs=2, spare_pairs=1, shards=8, rows=20, base_port=find_base_port(100), log=lambda *_: None)
        assert sb.state is not None
        reset_fleet(sb, even_layout(sb.state.shards, sb.pairs(spare=False)), rows=20)
        hosts, creds = sb.hosts(), sb.credentials()
        host = hosts[SOURCE]
        sysbench.prepare(host, creds, DB)
        with mysql.connect(host, creds) as c:
            start = str(mysql.binlog_pos(c))
        sysbench.run(host, creds, DB, seconds=args.seconds, threads=args.threads)

        def open_client() -> BinlogClient:
            return BinlogClient(host.address, host.port, creds.mysql_user, creds.mysql_password, start,
                                tls=mysql.tls_of(host, creds))

        n = count_events(open_client)
        sides = {"framer": BinlogClient.events, "pymysql": pymysql_events}
        for i in range(args.repeat):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for name in order:
                runs[name].append(read_n(open_client, sides[name], n))
            f, p = runs["framer"][-1], runs["pymysql"][-1]
            print(f"run {i + 1}: {n} events; framer {n / f[0]:.0f} events/s ({f[1] / n * 1e6:.2f} CPU-us/event), "
                  f"pymysql {n / p[0]:.0f} events/s ({p[1] / n * 1e6:.2f} CPU-us/event)", flush=True)
    finally:
        if own:
            sb.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)
    rate = {k: statistics.median(n / w for w, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c / n * 1e6 for _, c in v) for k, v in runs.items()}
    print(f"framer_events_per_s={rate['framer']:.0f} pymysql_events_per_s={rate['pymysql']:.0f} "
          f"framer_vs_pymysql={rate['framer'] / rate['pymysql']:.2f} framer_cpu_us_per_event={cpu['framer']:.2f} "
          f"pymysql_cpu_us_per_event={cpu['pymysql']:.2f} load_avg_before={load_before:.2f} "
          f"load_avg_after={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
