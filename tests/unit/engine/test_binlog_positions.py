"""Where a binlog reader is, and whether it has passed a target, when two servers share a GTID domain.

MariaDB's default layout puts every server in domain 0. A pair member then logs its partner's
transactions in the order it applied them: a late one keeps its lower seq_no and follows
transactions with higher ones (seen on MariaDB 10.11: ``0-1-7, 0-2-3, 0-2-4, ..., 0-1-8``). These
tests feed such a binlog to :class:`TxnReader` as framed events (no server needed)."""

from __future__ import annotations

import struct

from migrator.engine.binlog import client as bl
from migrator.engine.binlog.reader import FL_PREPARED_XA, TxnReader, format_pos, reaches, wanted
from migrator.fleet.gtid import Gtid, GtidPos, GtidState


def gtid_event(domain: int, server: int, seq: int, *, xid: bytes | None = None) -> bl.Event:
    flags2 = FL_PREPARED_XA if xid is not None else 0
    body = struct.pack("<QIB", seq, domain, flags2)
    if xid is not None:
        body += struct.pack("<iBB", 1, len(xid), 0) + xid
    return bl.Event(bl.GTID, 0, server, 0, body)


def xid_event(server: int) -> bl.Event:
    return bl.Event(bl.XID, 0, server, 0, struct.pack("<Q", 1))


def xa_prepare_event(server: int) -> bl.Event:
    return bl.Event(bl.XA_PREPARE, 0, server, 0, b"\x00" + b"\x00" * 16)


def read(rd: TxnReader, *gtids: tuple[int, int, int]) -> None:
    for d, s, q in gtids:
        rd.feed(gtid_event(d, s, q))
        rd.feed(xid_event(s))


# A's binlog: its own 0-1-3..7, then B's 0-2-3..7 applied two seconds late, then A's 0-1-8..12
SHARED = [(0, 1, q) for q in range(3, 8)] + [(0, 2, q) for q in range(3, 8)] + [(0, 1, q) for q in range(8, 13)]


def test_a_late_transaction_of_the_partner_does_not_unreach_a_passed_target():
    rd = TxnReader("0-1-2", ["db"])
    read(rd, *SHARED[:5])  # up to A's 0-1-7
    assert rd.reaches(wanted("0-1-7"))
    read(rd, *SHARED[5:6])  # B's 0-2-3, logged after it
    assert format_pos(rd.position) == "0-2-3"  # where a restart resumes: after that exact GTID
    assert not GtidPos.parse("0-2-3").contains("0-1-7")  # the per-domain view says "not passed"
    assert rd.reaches(wanted("0-1-7"))  # it was passed, and stays so


def test_a_target_with_a_lower_seq_no_is_not_reached_early():
    rd = TxnReader("0-1-2", ["db"])
    read(rd, *SHARED[:5])  # A's 0-1-3..7: per domain, seq 7 >= 5
    assert GtidPos.parse(format_pos(rd.position)).contains("0-2-5")  # what a per-domain check concludes
    assert not rd.reaches(wanted("0-2-5"))  # B's 0-2-5 is later in this binlog
    read(rd, *SHARED[5:8])
    assert rd.reaches(wanted("0-2-5")) and not rd.reaches(wanted("0-2-6"))


def test_a_head_read_as_a_position_is_reached_with_the_last_transaction_logged():
    rd = TxnReader("0-1-2", ["db"])
    head = "0-2-7"  # @@gtid_binlog_pos right after B's late 0-2-7 was applied on A
    read(rd, *SHARED[:9])  # up to 0-2-6
    assert not rd.reaches(wanted(head))
    read(rd, *SHARED[9:10])
    assert rd.reaches(wanted(head))


def test_one_domain_per_server_behaves_as_before():
    rd = TxnReader("1-1-10,2-2-5", ["db"])
    assert rd.reaches(wanted("1-1-9,2-2-5"))
    read(rd, (1, 1, 11), (2, 2, 6), (1, 1, 12))
    assert rd.reaches(wanted("1-1-12,2-2-6")) and not rd.reaches(wanted("2-2-7"))
    assert format_pos(rd.position) == "1-1-12,2-2-6"


def test_an_unresolved_xa_prepare_caps_its_domain_before_the_first_held_in_binlog_order():
    rd = TxnReader("0-1-2", ["db"])
    read(rd, (0, 1, 9))
    rd.feed(gtid_event(0, 1, 10, xid=b"x1"))  # A prepares at seq 10
    rd.feed(xa_prepare_event(1))
    read(rd, (0, 2, 4))  # B's late transaction: lower seq_no, later in the binlog
    rd.feed(gtid_event(0, 2, 5, xid=b"x2"))  # B's prepare, held too
    rd.feed(xa_prepare_event(2))
    read(rd, (0, 1, 11))
    # a restart must read both prepares again: resume right after 0-1-9, before the first of them
    assert format_pos(rd.position) == "0-1-9"


def test_state_reaches_and_own():
    st = GtidState.parse("0-1-12,0-2-7,1-1-14")
    assert st.reaches("0-2-7") and st.reaches(Gtid(0, 1, 3)) and not st.reaches("0-2-8")
    assert not st.reaches("0-3-1")  # a server it never logged
    assert str(st.own(2)) == "0-2-7" and str(st.own(1)) == "0-1-12,1-1-14"
    assert GtidState.of("0-1-5", GtidPos.parse("0-2-9"), "0-1-3") == GtidState.parse("0-1-5,0-2-9")
    assert st.with_gtid(Gtid(0, 2, 3)) is st  # a server's numbering only grows
    assert GtidState.parse("0-1-5").earlier_than(st) and not st.earlier_than(GtidState.parse("0-1-5"))


def test_reaches_of_a_plain_state():
    assert reaches({(0, 1): 12, (0, 2): 7}, wanted("0-1-12,0-2-7"))
    assert not reaches({(0, 1): 12}, wanted("0-1-12,0-2-7"))


def rollback_event(server: int) -> bl.Event:
    q = b"ROLLBACK"
    body = struct.pack("<IIBHH", 1, 0, 0, 0, 0) + b"" + b"\x00" + q  # no status vars, no schema
    return bl.Event(bl.QUERY, 0, server, 0, body)


def test_a_group_ending_in_rollback_is_read_past():
    rd = TxnReader("0-1-2", ["db"])
    read(rd, (0, 1, 3))
    rd.feed(gtid_event(0, 1, 4))
    assert rd.feed(rollback_event(1)) is None  # nothing of it is applied...
    assert rd.reaches(wanted("0-1-4")) and format_pos(rd.position) == "0-1-4"  # ...but it was read
