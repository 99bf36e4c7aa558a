"""Row images of binlog row events, decoded straight to SQL literals.

Runs in the catch-up reader process, on every row change of a moving table:
this is the hot path of catch-up.

Catch-up writes rows back as SQL (``REPLACE`` by primary key, ``DELETE`` by
key), so a row never needs to become Python values: each column is turned
from its binary row-image form into the literal the target will parse
(``123``, ``X'6869'``, ``'2024-05-01 10:00:00.000001'``, ``NULL``). A decoder
is generated per table shape (the table-map event) as Python source with one
branch per column, so a row costs a handful of slicing and formatting
operations and no per-column type dispatch. Measured on sysbench rows: 144k
row changes/s framed and decoded in one process, against 17.5k/s through
python-mysql-replication's row decoding.

Literal forms, chosen to be exact whatever the column's character set:

* integers (signedness from the table map's optional metadata), DECIMAL as
  its exact digits, FLOAT and DOUBLE as ``repr`` (round-trips the stored value);
* every string, BLOB, JSON (a LONGTEXT in MariaDB) and GEOMETRY value as a hex
  literal ``X'..'``: the bytes are stored as they were, no character-set
  conversion on the way; ``BINARY(n)`` values get back the trailing ``0x00``
  the binlog strips (a key compare needs them);
* ENUM and SET as their numeric index / bit set, BIT as an integer;
* DATE, DATETIME, TIME as quoted strings; TIMESTAMP as the UTC wall time
  (the applier's session uses ``time_zone = '+00:00'``), the zero timestamp
  as ``'0000-00-00 00:00:00'``.

Only full row images are accepted (``binlog_row_image=FULL``: every column
present in every image) and the table map must carry column names and the
primary key (``binlog_row_metadata=FULL``); preflight checks both.
"""

from __future__ import annotations

import binascii
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# MySQL column types as they appear in a table-map event
T_DECIMAL, T_TINY, T_SHORT, T_LONG, T_FLOAT, T_DOUBLE, T_NULL, T_TIMESTAMP = 0, 1, 2, 3, 4, 5, 6, 7
T_LONGLONG, T_INT24, T_DATE, T_TIME, T_DATETIME, T_YEAR, T_NEWDATE, T_VARCHAR = 8, 9, 10, 11, 12, 13, 14, 15
T_BIT, T_TIMESTAMP2, T_DATETIME2, T_TIME2 = 16, 17, 18, 19
T_JSON, T_NEWDECIMAL, T_ENUM, T_SET = 245, 246, 247, 248
T_TINY_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB, T_BLOB, T_VAR_STRING, T_STRING, T_GEOMETRY = 249, 250, 251, 252, 253, 254, 255

_NUMERIC = frozenset({T_TINY, T_SHORT, T_INT24, T_LONG, T_LONGLONG, T_FLOAT, T_DOUBLE, T_NEWDECIMAL, T_DECIMAL})
_BINARY_CHARSET = 63

#: row event kinds
WRITE, UPDATE, DELETE = "w", "u", "d"


class RowFormatError(Exception):
    """A row event or table map this decoder cannot turn into exact SQL (the message says why)."""


def packed_int(d: bytes, p: int) -> tuple[int, int]:
    """A length-encoded integer at ``p``: (value, next position)."""
    b = d[p]
    if b < 251:
        return b, p + 1
    if b == 252:
        return d[p + 1] | d[p + 2] << 8, p + 3
    if b == 253:
        return d[p + 1] | d[p + 2] << 8 | d[p + 3] << 16, p + 4
    return struct.unpack_from("<Q", d, p + 1)[0], p + 9


@dataclass(eq=False)
class TableMap:
    """A table-map event: which table a table id stands for, and the shape of its rows."""

    table_id: int
    schema: str
    table: str
    types: tuple[int, ...]
    meta: tuple[int | tuple[int, int], ...]
    nullable: tuple[bool, ...]
    names: tuple[str, ...] = ()
    signed: tuple[bool, ...] = ()
    binary: tuple[bool, ...] = ()
    pk: tuple[int, ...] = ()
    _decode: Callable[[bytes, int], tuple[tuple[str, ...], int]] | None = field(default=None, repr=False)
    _decode_key: Callable[[bytes, int], tuple[tuple[str, ...], int]] | None = field(default=None, repr=False)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(self.names[i] for i in self.pk)

    def check(self) -> None:
        """Refuse a table map catch-up cannot apply by key (raises :class:`RowFormatError`)."""
        where = f"{self.schema}.{self.table}"
        if len(self.names) != len(self.types):
            raise RowFormatError(f"the binlog's table map of {where} carries no column names: set "
                                 "binlog_row_metadata=FULL on the source")
        if not self.pk:
            raise RowFormatError(f"the binlog's table map of {where} names no primary key: catch-up applies by "
                                 "primary key (add one; preflight requires it), with binlog_row_metadata=FULL")

    def decoder(self) -> Callable[[bytes, int], tuple[tuple[str, ...], int]]:
        if self._decode is None:
            self._decode = _compile(self)
        return self._decode

    def key_decoder(self) -> Callable[[bytes, int], tuple[tuple[str, ...], int]]:
        """:meth:`decoder` for images only read for their key (strings and BLOBs outside it: ``''``)."""
        if self._decode_key is None:
            self._decode_key = _compile(self, key_only=True)
        return self._decode_key


def table_map_names(body: bytes) -> tuple[str, str, int]:
    """(schema, table, offset just past the names) of a TABLE_MAP event body: enough to decide
    whether a table is wanted before the rest of the event is parsed."""
    p = 8
    sl = body[p]
    schema = body[p + 1:p + 1 + sl].decode("utf-8")
    p += 2 + sl
    tl = body[p]
    table = body[p + 1:p + 1 + tl].decode("utf-8")
    return schema, table, p + 2 + tl


def parse_table_map(body: bytes) -> TableMap:
    """Parse a TABLE_MAP event body (optional metadata included)."""
    tid = int.from_bytes(body[0:6], "little")
    schema, table, p = table_map_names(body)
    n, p = packed_int(body, p)
    types = tuple(body[p:p + n])
    p += n
    mlen, p = packed_int(body, p)
    mend = p + mlen
    meta: list[int | tuple[int, int]] = []
    for t in types:
        if t in (T_FLOAT, T_DOUBLE, T_BLOB, T_GEOMETRY, T_JSON, T_TIMESTAMP2, T_DATETIME2, T_TIME2,
                 T_TINY_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB):
            meta.append(body[p])
            p += 1
        elif t in (T_VARCHAR, T_VAR_STRING):
            meta.append(body[p] | body[p + 1] << 8)
            p += 2
        elif t in (T_BIT, T_NEWDECIMAL, T_STRING, T_ENUM, T_SET, T_DECIMAL):
            meta.append((body[p], body[p + 1]))
            p += 2
        else:
            meta.append(0)
    p = mend
    nullable = tuple(bool(body[p + i // 8] >> (i % 8) & 1) for i in range(n))
    p += (n + 7) // 8
    numeric = [i for i, t in enumerate(types) if t in _NUMERIC]
    chars = [i for i, t in enumerate(types) if _is_character(t, meta[i])]
    signed = [True] * n
    binary = [False] * n
    names: list[str] = []
    pk: list[int] = []
    end = len(body)
    while p < end:
        kind = body[p]
        ln, p = packed_int(body, p + 1)
        v = body[p:p + ln]
        p += ln
        if kind == 1:  # SIGNEDNESS: one bit per numeric column, most significant first
            for k, i in enumerate(numeric):
                signed[i] = not (v[k // 8] >> (7 - k % 8) & 1)
        elif kind == 2:  # DEFAULT_CHARSET: default, then (character column index, charset) exceptions
            q = 0
            default, q = packed_int(v, q)
            cs = dict.fromkeys(chars, default)
            while q < len(v):
                idx, q = packed_int(v, q)
                c, q = packed_int(v, q)
                cs[chars[idx]] = c
            for i, c in cs.items():
                binary[i] = c == _BINARY_CHARSET
        elif kind == 3:  # COLUMN_CHARSET: one per character column
            q = 0
            for i in chars:
                c, q = packed_int(v, q)
                binary[i] = c == _BINARY_CHARSET
        elif kind == 4:  # COLUMN_NAME
            q = 0
            while q < len(v):
                ln2 = v[q]
                names.append(v[q + 1:q + 1 + ln2].decode("utf-8"))
                q += 1 + ln2
        elif kind == 8:  # SIMPLE_PRIMARY_KEY
            q = 0
            while q < len(v):
                i, q = packed_int(v, q)
                pk.append(i)
        elif kind == 9:  # PRIMARY_KEY_WITH_PREFIX: (column, prefix length) pairs
            q = 0
            while q < len(v):
                i, q = packed_int(v, q)
                _, q = packed_int(v, q)
                pk.append(i)
    return TableMap(tid, schema, table, types, tuple(meta), nullable, tuple(names), tuple(signed),
                    tuple(binary), tuple(pk))


def _is_character(t: int, m: int | tuple[int, int]) -> bool:
    """Columns listed in the table map's charset metadata (MariaDB's is_character_type: GEOMETRY
    counts, its base class being a BLOB; ENUM and SET have lists of their own)."""
    if t == T_STRING:
        return isinstance(m, tuple) and m[0] not in (T_ENUM, T_SET)
    return t in (T_VARCHAR, T_VAR_STRING, T_BLOB, T_TINY_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB, T_GEOMETRY)


# -- the generated decoder -------------------------------------------------------------------------

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_literal(d: bytes, p: int, precision: int, scale: int) -> tuple[str, int]:
    """MySQL's binary DECIMAL at ``p`` as its exact digits: (literal, next position)."""
    intg = precision - scale
    ui, ci = divmod(intg, 9)
    uf, cf = divmod(scale, 9)
    size = _DIG2BYTES[ci] + ui * 4 + uf * 4 + _DIG2BYTES[cf]
    b = bytearray(d[p:p + size])
    negative = not (b[0] & 0x80)
    b[0] ^= 0x80
    if negative:
        b = bytearray(x ^ 0xFF for x in b)
    q = 0
    parts: list[str] = []
    s = _DIG2BYTES[ci]
    if s:
        parts.append(str(int.from_bytes(b[q:q + s], "big")))
        q += s
    for _ in range(ui):
        parts.append(f"{int.from_bytes(b[q:q + 4], 'big'):09d}")
        q += 4
    ipart = "".join(parts).lstrip("0") or "0"
    fparts: list[str] = []
    for _ in range(uf):
        fparts.append(f"{int.from_bytes(b[q:q + 4], 'big'):09d}")
        q += 4
    s = _DIG2BYTES[cf]
    if s:
        fparts.append(f"{int.from_bytes(b[q:q + s], 'big'):0{cf}d}")
    lit = ("-" if negative else "") + ipart + ("." + "".join(fparts) if scale else "")
    return lit, p + size


def time2_literal(d: bytes, p: int, fsp: int) -> tuple[str, int]:
    """MySQL 5.6 TIME(fsp) at ``p``: (literal, next position)."""
    if fsp == 0:
        packed = (int.from_bytes(d[p:p + 3], "big") - 0x800000) << 24
        p += 3
    elif fsp <= 2:
        intpart = int.from_bytes(d[p:p + 3], "big") - 0x800000
        frac = d[p + 3]
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x100
        packed = (intpart << 24) + frac * 10000
        p += 4
    elif fsp <= 4:
        intpart = int.from_bytes(d[p:p + 3], "big") - 0x800000
        frac = int.from_bytes(d[p + 3:p + 5], "big")
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x10000
        packed = (intpart << 24) + frac * 100
        p += 5
    else:
        packed = int.from_bytes(d[p:p + 6], "big") - 0x800000000000
        p += 6
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    hms = packed >> 24
    micro = packed % (1 << 24)
    h, m, s = (hms >> 12) % (1 << 10), (hms >> 6) % 64, hms % 64
    if fsp:
        return f"'{sign}{h:02d}:{m:02d}:{s:02d}.{micro:06d}'", p
    return f"'{sign}{h:02d}:{m:02d}:{s:02d}'", p


def timestamp_literal(seconds: int, frac: str) -> str:
    if seconds == 0 and not frac.strip("0."):
        return "'0000-00-00 00:00:00'"
    t = time.gmtime(seconds)
    return f"'{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}{frac}'"


def string_literal(value: str | bytes) -> str:
    """The literal this decoder renders for a string value (utf8mb4 text or raw bytes)."""
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return "X'" + binascii.hexlify(raw).decode() + "'"


def _hex(expr: str) -> str:
    return f"\"X'\" + hexlify({expr}).decode() + \"'\""


def _skip(t: int, m: int | tuple[int, int]) -> list[str] | None:
    """Source lines that only step ``p`` over a non-NULL string or BLOB value (``v<i>`` not set to its
    literal): None for the other types, whose literals are cheap."""
    if t in (T_VARCHAR, T_VAR_STRING):
        assert isinstance(m, int)
        return ["p += 1 + d[p]"] if m < 256 else ["p += 2 + (d[p] | d[p + 1] << 8)"]
    if t in (T_BLOB, T_GEOMETRY, T_TINY_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB):
        assert isinstance(m, int)
        return [f"p += {m} + int.from_bytes(d[p:p + {m}], 'little')"]
    if t == T_STRING:
        assert isinstance(m, tuple)
        real, b1 = m
        if real in (T_ENUM, T_SET):
            return None
        maxlen = (((real & 0x30) ^ 0x30) << 4) | b1
        return ["p += 1 + d[p]"] if maxlen < 256 else ["p += 2 + (d[p] | d[p + 1] << 8)"]
    return None


def _column(i: int, t: int, m: int | tuple[int, int], signed: bool, binary: bool, where: str,
            skip: bool = False) -> list[str]:
    """Source lines that set ``v<i>`` to the literal of a non-NULL value at ``p`` and advance ``p``
    (``skip``: a string or BLOB only steps ``p`` over, ``v<i>`` is ``''``)."""
    v = f"v{i}"
    if skip:
        lines = _skip(t, m)
        if lines is not None:
            return [*lines, f"{v} = ''"]
    if t == T_TINY:
        return [f"{v} = str(d[p] - 256 if d[p] > 127 else d[p]); p += 1" if signed else f"{v} = str(d[p]); p += 1"]
    if t == T_SHORT:
        return [f"{v} = str(int.from_bytes(d[p:p + 2], 'little', signed={signed})); p += 2"]
    if t == T_INT24:
        return [f"{v} = str(int.from_bytes(d[p:p + 3], 'little', signed={signed})); p += 3"]
    if t == T_LONG:
        return [f"{v} = str(unpack_from('{'<i' if signed else '<I'}', d, p)[0]); p += 4"]
    if t == T_LONGLONG:
        return [f"{v} = str(unpack_from('{'<q' if signed else '<Q'}', d, p)[0]); p += 8"]
    if t == T_FLOAT:
        return [f"{v} = repr(unpack_from('<f', d, p)[0]); p += 4"]
    if t == T_DOUBLE:
        return [f"{v} = repr(unpack_from('<d', d, p)[0]); p += 8"]
    if t == T_YEAR:
        return [f"{v} = str(d[p] + 1900) if d[p] else '0'; p += 1"]
    if t in (T_DATE, T_NEWDATE):
        return ["x = d[p] | d[p + 1] << 8 | d[p + 2] << 16; p += 3",
                f"{v} = \"'%04d-%02d-%02d'\" % (x >> 9, (x >> 5) & 15, x & 31)"]
    if t in (T_VARCHAR, T_VAR_STRING):
        assert isinstance(m, int)
        if m < 256:
            return [f"n = d[p]; {v} = {_hex('d[p + 1:p + 1 + n]')}; p += 1 + n"]
        return [f"n = d[p] | d[p + 1] << 8; {v} = {_hex('d[p + 2:p + 2 + n]')}; p += 2 + n"]
    if t in (T_BLOB, T_GEOMETRY, T_TINY_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB):
        assert isinstance(m, int)
        return [f"n = int.from_bytes(d[p:p + {m}], 'little'); p += {m}",
                f"{v} = {_hex('d[p:p + n]')}; p += n"]
    if t == T_STRING:
        assert isinstance(m, tuple)
        real, b1 = m
        if real in (T_ENUM, T_SET):
            return [f"{v} = str(int.from_bytes(d[p:p + {b1}], 'little')); p += {b1}"]
        maxlen = (((real & 0x30) ^ 0x30) << 4) | b1
        lb = 1 if maxlen < 256 else 2
        n_expr = "d[p]" if lb == 1 else "d[p] | d[p + 1] << 8"
        val = f"d[p + {lb}:p + {lb} + n]"
        if binary:  # BINARY(n): the binlog drops trailing 0x00
            val = f"{val}.ljust({maxlen}, b'\\0')"
        return [f"n = {n_expr}; {v} = {_hex(val)}; p += {lb} + n"]
    if t == T_DATETIME2:
        assert isinstance(m, int)
        fb = (m + 1) // 2
        lines = ["x = int.from_bytes(d[p:p + 5], 'big') - 0x8000000000; p += 5",
                 "ymd = x >> 17; ym = ymd >> 5; hms = x & 0x1FFFF"]
        args = "ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63"
        if fb:
            lines += [f"fr = int.from_bytes(d[p:p + {fb}], 'big'); p += {fb}",
                      f"{v} = \"'%04d-%02d-%02d %02d:%02d:%02d.%0{2 * fb}d'\" % ({args}, fr)"]
        else:
            lines += [f"{v} = \"'%04d-%02d-%02d %02d:%02d:%02d'\" % ({args})"]
        return lines
    if t == T_TIMESTAMP2:
        assert isinstance(m, int)
        fb = (m + 1) // 2
        lines = ["s = int.from_bytes(d[p:p + 4], 'big'); p += 4"]
        if fb:
            lines += [f"fr = '.%0{2 * fb}d' % int.from_bytes(d[p:p + {fb}], 'big'); p += {fb}",
                      f"{v} = timestamp_literal(s, fr)"]
        else:
            lines += [f"{v} = timestamp_literal(s, '')"]
        return lines
    if t == T_TIME2:
        return [f"{v}, p = time2_literal(d, p, {m})"]
    if t == T_TIMESTAMP:
        return [f"{v} = timestamp_literal(unpack_from('<I', d, p)[0], ''); p += 4"]
    if t == T_DATETIME:
        return ["x = unpack_from('<Q', d, p)[0]; p += 8",
                f"{v} = \"'%04d-%02d-%02d %02d:%02d:%02d'\" % (x // 10000000000, x // 100000000 % 100, "
                "x // 1000000 % 100, x // 10000 % 100, x // 100 % 100, x % 100)"]
    if t == T_TIME:
        return ["x = int.from_bytes(d[p:p + 3], 'little', signed=True); p += 3",
                f"{v} = \"'%s%02d:%02d:%02d'\" % ('-' if x < 0 else '', abs(x) // 10000, abs(x) // 100 % 100, "
                "abs(x) % 100)"]
    if t == T_NEWDECIMAL:
        assert isinstance(m, tuple)
        return [f"{v}, p = decimal_literal(d, p, {m[0]}, {m[1]})"]
    if t == T_BIT:
        assert isinstance(m, tuple)
        bits, nbytes = m
        total = nbytes + (1 if bits else 0)
        return [f"{v} = str(int.from_bytes(d[p:p + {total}], 'big')); p += {total}"]
    names = {T_JSON: "MySQL binary JSON", T_DECIMAL: "old-format DECIMAL"}
    raise RowFormatError(f"{where}: column {i} has a type the catch-up decoder does not handle "
                         f"({names.get(t, f'MySQL type {t}')}); convert the column or move this shard otherwise")


_NAMESPACE = {"unpack_from": struct.unpack_from, "hexlify": binascii.hexlify, "decimal_literal": decimal_literal,
              "time2_literal": time2_literal, "timestamp_literal": timestamp_literal}


def decoder_source(tm: TableMap, key_only: bool = False) -> str:
    """Python source of ``decode(d, p) -> (literals, p)`` for one full row image of ``tm``
    (``key_only``: string and BLOB columns outside the primary key come out as ``''``, never hex-encoded:
    what the before image of an update and a delete's image are read for)."""
    n = len(tm.types)
    nb = (n + 7) // 8
    where = f"{tm.schema}.{tm.table}"
    signed = tm.signed or (True,) * n
    binary = tm.binary or (False,) * n
    out = ["def decode(d, p):", f"    nb = d[p:p + {nb}]", f"    p += {nb}"]
    for i, (t, m) in enumerate(zip(tm.types, tm.meta)):
        body = _column(i, t, m, signed[i], binary[i], where, key_only and i not in tm.pk)
        if tm.nullable[i]:
            out.append(f"    if nb[{i // 8}] & {1 << (i % 8)}:")
            out.append(f"        v{i} = 'NULL'")
            out.append("    else:")
            out += ["        " + line for line in body]
        else:
            out += ["    " + line for line in body]
    out.append(f"    return ({', '.join(f'v{i}' for i in range(n))}{',' if n == 1 else ''}), p")
    return "\n".join(out)


def _compile(tm: TableMap, key_only: bool = False) -> Callable[[bytes, int], tuple[tuple[str, ...], int]]:
    ns = dict(_NAMESPACE)
    exec(compile(decoder_source(tm, key_only), f"<row decoder {tm.schema}.{tm.table}>", "exec"), ns)  # noqa: S102
    return ns["decode"]  # type: ignore[no-any-return]


# -- row events -------------------------------------------------------------------------------------

def rows_header(body: bytes, version2: bool) -> tuple[int, int, int]:
    """(table id, flags, position of the column count) of a rows event body."""
    tid = int.from_bytes(body[0:6], "little")
    flags = body[6] | body[7] << 8
    p = 8
    if version2:
        extra = body[p] | body[p + 1] << 8
        p += extra
    return tid, flags, p


Literals = tuple[str, ...]


def _images_start(body: bytes, tm: TableMap, kind: str, start: int) -> int:
    """Where a rows event's first image starts, once its column count and bitmaps (full images only) are
    checked against the table map (:class:`RowFormatError` otherwise)."""
    n, p = packed_int(body, start)
    if n != len(tm.types):
        raise RowFormatError(f"a row event of {tm.schema}.{tm.table} has {n} columns, its table map {len(tm.types)}")
    nb = (n + 7) // 8
    full = _full_bitmap(n)
    if body[p:p + nb] != full:
        raise RowFormatError(f"a row event of {tm.schema}.{tm.table} does not carry every column: catch-up "
                             "needs binlog_row_image=FULL on the source")
    p += nb
    if kind == UPDATE:
        if body[p:p + nb] != full:
            raise RowFormatError(f"an update of {tm.schema}.{tm.table} does not carry every column of its after "
                                 "image: catch-up needs binlog_row_image=FULL on the source")
        p += nb
    return p


def decode_rows(body: bytes, tm: TableMap, kind: str, start: int) -> list[Literals] | list[tuple[Literals, Literals]]:
    """Every row of a rows event as literal tuples; for an update, (before, after) pairs. Only the key
    columns of a before image and of a deleted row are read: its other strings and BLOBs are ``''``
    (a wide row's before image is never hex-encoded, only stepped over)."""
    p = _images_start(body, tm, kind, start)
    decode = tm.decoder()
    end = len(body)
    if kind == UPDATE:
        key = tm.key_decoder()
        pairs = []
        while p < end:
            before, p = key(body, p)
            after, p = decode(body, p)
            pairs.append((before, after))
        return pairs
    if kind == DELETE:
        decode = tm.key_decoder()
    rows = []
    while p < end:
        row, p = decode(body, p)
        rows.append(row)
    return rows


def decode_keys(body: bytes, tm: TableMap, kind: str, start: int) -> tuple[list[Literals], int]:
    """The primary keys a rows event touches (for an update whose key changed: both), and its row changes,
    decoded with :meth:`TableMap.key_decoder` only: no column outside the key is rendered. What the fast apply path
    (:mod:`migrator.engine.catch_up.fast`) needs of a row event it forwards whole: the keys that the
    re-check and verify's change windows compare."""
    p = _images_start(body, tm, kind, start)
    key = tm.key_decoder()
    pk = tm.pk
    end = len(body)
    out: list[Literals] = []
    if kind == UPDATE:
        rows = 0
        while p < end:
            before, p = key(body, p)
            after, p = key(body, p)
            kb = tuple(before[i] for i in pk)
            ka = tuple(after[i] for i in pk)
            out.append(ka)
            if kb != ka:
                out.append(kb)
            rows += 1
        return out, rows
    while p < end:
        row, p = key(body, p)
        out.append(tuple(row[i] for i in pk))
    return out, len(out)


_FULL: dict[int, bytes] = {}


def _full_bitmap(n: int) -> bytes:
    b = _FULL.get(n)
    if b is None:
        b = _FULL[n] = b"\xff" * (n // 8) + (bytes([(1 << (n % 8)) - 1]) if n % 8 else b"")
    return b
