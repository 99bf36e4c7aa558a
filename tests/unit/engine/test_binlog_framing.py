"""The dump stream's framing (``BinlogClient.events``) cut from bytes that arrive in pieces of any size:
events with and without a CRC32, an event split over two packets (16 MiB - 1 bytes, then the rest), the
master's error packet, a failed checksum and a connection closed mid-packet."""

from __future__ import annotations

import io
import random
import struct
import zlib
from types import SimpleNamespace

import pytest

from migrator.engine.binlog.client import GTID, HEARTBEAT, MAX_PACKET, WRITE_ROWS_V1, BinlogClient, BinlogError


class Pieces(io.RawIOBase):
    """A socket that hands out its bytes in pieces of random size (1 byte to 64 KiB)."""

    def __init__(self, data: bytes, seed: int):
        self.data, self.pos, self.rnd = data, 0, random.Random(seed)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.rnd.choice((1, 3, 17, 4096, 65536)), len(self.data) - self.pos)
        b[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n


def event(etype: int, body: bytes, *, checksum: bool, ts: int = 7, sid: int = 11, flags: int = 0) -> bytes:
    """One event's payload as the master sends it: the OK byte, the 19-byte header, the body, its CRC32."""
    size = 19 + len(body) + (4 if checksum else 0)
    ev = struct.pack("<IBIIIH", ts, etype, sid, size, 1234, flags) + body
    return b"\x00" + ev + (struct.pack("<I", zlib.crc32(ev)) if checksum else b"")


def packets(payload: bytes, seq: int = 1) -> bytes:
    """MySQL's framing of one payload: packets of at most 16 MiB - 1 bytes (a full one continues)."""
    out, i = [], 0
    while True:
        part = payload[i:i + MAX_PACKET]
        out.append(len(part).to_bytes(3, "little") + bytes([seq % 256]) + part)
        seq += 1
        i += MAX_PACKET
        if len(part) < MAX_PACKET:
            return b"".join(out)


def client(stream: bytes, *, checksum: bool, seed: int = 0) -> BinlogClient:
    c = object.__new__(BinlogClient)
    c._checksum = checksum
    c.conn = SimpleNamespace(_sock=SimpleNamespace(settimeout=lambda t: None), _read_timeout=30,
                             _rfile=io.BufferedReader(Pieces(stream, seed), buffer_size=8192))
    return c


@pytest.mark.parametrize("checksum", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_events_are_cut_whole_from_pieces_of_any_size(checksum, seed):
    rnd = random.Random(seed)
    sent = [(WRITE_ROWS_V1 if i % 3 else GTID, rnd.randbytes(rnd.choice((0, 1, 40, 300, 70_000)))) for i in range(200)]
    stream = b"".join(packets(event(t, b, checksum=checksum)) for t, b in sent)
    stream += packets(b"\xff" + struct.pack("<H", 1236) + b"#HY000" + b"the end")
    got = []
    with pytest.raises(BinlogError) as end:
        for ev in client(stream, checksum=checksum, seed=seed).events():
            got.append((ev.type, ev.body))
    assert got == sent
    assert end.value.code == 1236 and str(end.value) == "the end"


def test_an_event_over_16_mib_is_joined_from_its_packets_and_the_next_follows():
    big = random.Random(1).randbytes(MAX_PACKET + 1000)
    stream = (packets(event(WRITE_ROWS_V1, big, checksum=True)) + packets(event(HEARTBEAT, b"hb", checksum=True))
              + packets(event(GTID, b"g", checksum=True)))
    events = client(stream, checksum=True).events()
    first = next(events)
    assert first.type == WRITE_ROWS_V1 and first.body == big
    assert [(e.type, e.body) for e in (next(events), next(events))] == [(HEARTBEAT, b"hb"), (GTID, b"g")]


def test_a_failed_checksum_and_a_closed_connection_are_errors():
    bad = bytearray(event(GTID, b"abc", checksum=True))
    bad[-1] ^= 0xFF
    with pytest.raises(BinlogError, match="CRC32"):
        next(client(packets(bytes(bad)), checksum=True).events())
    cut = packets(event(GTID, b"abcdef", checksum=True))[:-3]
    with pytest.raises(BinlogError, match="closed the connection") as lost:
        next(client(cut, checksum=True).events())
    assert lost.value.code == 2013
