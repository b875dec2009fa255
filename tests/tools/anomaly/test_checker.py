"""The checker on hand-made histories: clean ones pass, and each anomaly kind is found, with the
operations that show it (a checker that cannot fail proves nothing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.anomaly.__main__ import main
from tools.anomaly.checker import KINDS, Report, check
from tools.anomaly.cycles import Edge, find_cycles
from tools.anomaly.history import HistoryError, Op, load_history, merge, read_lines, write_history


class History:
    """Builds a history op by op, in order (``mono`` increases by one per op)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def op(self, process: str, type_: str, f: str, **fields: Any) -> History:
        client = process.rsplit(".", 1)[0]
        mono = float(len(self.ops))
        self.ops.append(Op(process, client, type_, f, fields, 1e9 + mono, mono, len(self.ops)))
        return self

    def send(self, process: str, value: str, partition: int, offset: int, txn: str | None = None) -> History:
        self.op(process, "invoke", "send", value=value, txn=txn)
        return self.op(process, "ok", "send", value=value, txn=txn, partition=partition, offset=offset)

    def txn(
        self,
        process: str,
        txn: str,
        writes: list[tuple[str, int, int]],
        *,
        end: str = "commit",
        reads: list[list[Any]] | None = None,
    ) -> History:
        self.op(process, "ok", "txn-begin", txn=txn)
        if reads:
            self.op(process, "ok", "poll", records=reads, txn=txn)
        for value, partition, offset in writes:
            self.send(process, value, partition, offset, txn)
        if end == "commit":
            self.op(process, "invoke", "txn-commit", txn=txn)
            self.op(process, "ok", "txn-commit", txn=txn)
        elif end == "abort":
            self.op(process, "invoke", "txn-abort", txn=txn)
            self.op(process, "ok", "txn-abort", txn=txn)
        return self

    def poll(self, process: str, *records: tuple[int, int, str]) -> History:
        return self.op(process, "ok", "poll", records=[list(r) for r in records], txn=None)

    def final(self, partitions: dict[int, list[tuple[int, str]]]) -> History:
        found = {str(p): [list(r) for r in records] for p, records in partitions.items()}
        return self.op("final-reader", "ok", "final-read", partitions=found)

    def check(self) -> Report:
        return check(self.ops)


def kinds(report: Report) -> set[str]:
    return set(report.by_kind())


def clean() -> History:
    """Two producers, a transaction committed and one aborted, a consumer, a final read."""
    h = History()
    h.send("p-0.1", "p-0.1-0", 0, 0).send("p-0.1", "p-0.1-1", 0, 1)
    h.txn("t-0.1", "t-0.1#0", [("t-0.1-0", 1, 0), ("t-0.1-1", 1, 1)])
    h.txn("t-0.1", "t-0.1#1", [("t-0.1-2", 1, 3)], end="abort")
    h.txn("t-1.1", "t-1.1#0", [("t-1.1-0", 2, 0)], reads=[[1, 0, "t-0.1-0"]])
    h.op("c-0.1", "ok", "assign", partitions=[0, 1, 2])
    h.poll("c-0.1", (0, 0, "p-0.1-0"), (1, 0, "t-0.1-0"))
    h.poll("c-0.1", (0, 1, "p-0.1-1"), (1, 1, "t-0.1-1"), (2, 0, "t-1.1-0"))
    return h.final(
        {0: [(0, "p-0.1-0"), (1, "p-0.1-1")], 1: [(0, "t-0.1-0"), (1, "t-0.1-1")], 2: [(0, "t-1.1-0")]}
    )


def test_clean_history_is_valid() -> None:
    report = clean().check()
    assert report.valid, report.render()
    assert report.stats["txns-committed"] == 2 and report.stats["txns-aborted"] == 1
    assert "valid: no anomalies" in report.render()


def test_lost_write_acknowledged_but_absent_from_final_read() -> None:
    h = History().send("p-0.1", "p-0.1-0", 0, 0).send("p-0.1", "p-0.1-1", 0, 1)
    report = h.final({0: [(0, "p-0.1-0")]}).check()
    assert kinds(report) == {"lost-write"}
    (lost,) = report.anomalies
    assert "p-0.1-1" in lost.message and [op.type for op in lost.ops] == ["invoke", "ok"]


def test_lost_write_of_a_committed_transaction() -> None:
    h = History().txn("t-0.1", "t-0.1#0", [("t-0.1-0", 0, 0), ("t-0.1-1", 0, 1)])
    report = h.final({0: [(0, "t-0.1-0")]}).check()
    assert kinds(report) == {"lost-write"}
    assert any(op.f == "txn-commit" for op in report.anomalies[0].ops)


def test_unacknowledged_and_aborted_writes_may_be_absent() -> None:
    h = History().op("p-0.1", "invoke", "send", value="p-0.1-0", txn=None)
    h.op("p-0.1", "info", "send", value="p-0.1-0", txn=None, error="timeout")
    h.txn("t-0.1", "t-0.1#0", [("t-0.1-0", 0, 1)], end="abort")
    h.txn("t-0.1", "t-0.1#1", [("t-0.1-1", 0, 3)], end="none")  # killed before the commit
    assert h.final({0: []}).check().valid


def test_duplicate_value_at_two_offsets() -> None:
    h = History().send("p-0.1", "p-0.1-0", 0, 0)
    report = h.final({0: [(0, "p-0.1-0"), (1, "p-0.1-0")]}).check()
    assert "duplicate" in kinds(report)
    assert "0:0, 0:1" in report.by_kind()["duplicate"][0].message


def test_inconsistent_offset_two_values_across_reads() -> None:
    h = History().send("p-0.1", "p-0.1-0", 0, 0).send("p-0.1", "p-0.1-1", 0, 1)
    h.poll("c-0.1", (0, 0, "p-0.1-1"))
    report = h.final({0: [(0, "p-0.1-0"), (1, "p-0.1-1")]}).check()
    assert "inconsistent-offset" in kinds(report)
    assert "partition 0 offset 0 holds p-0.1-0, p-0.1-1" in report.render()


def test_aborted_read_of_an_acknowledged_abort() -> None:
    h = History().txn("t-0.1", "t-0.1#0", [("t-0.1-0", 0, 0)], end="abort")
    h.poll("c-0.1", (0, 0, "t-0.1-0"))
    report = h.final({0: []}).check()
    assert kinds(report) == {"aborted-read"}
    assert any(op.f == "txn-abort" and op.type == "ok" for op in report.anomalies[0].ops)


def test_aborted_read_of_a_transaction_never_committed() -> None:
    """A client killed before it asked for the commit: the coordinator can only abort."""
    h = History().txn("t-0.1", "t-0.1#0", [("t-0.1-0", 0, 0)], end="none")
    report = h.final({0: [(0, "t-0.1-0")]}).check()
    assert kinds(report) == {"aborted-read"}


def test_commit_of_unknown_outcome_is_decided_by_the_final_read() -> None:
    h = History().op("t-0.1", "ok", "txn-begin", txn="t-0.1#0").send("t-0.1", "t-0.1-0", 0, 0, "t-0.1#0")
    h.op("t-0.1", "invoke", "txn-commit", txn="t-0.1#0")
    h.op("t-0.1", "info", "txn-commit", txn="t-0.1#0", error="timeout")
    assert h.final({0: [(0, "t-0.1-0")]}).check().valid
    h.ops.pop()
    assert h.final({0: []}).check().valid


def test_read_of_a_value_never_sent() -> None:
    h = History().send("p-0.1", "p-0.1-0", 0, 0).poll("c-0.1", (0, 1, "p-9.1-0"))
    report = h.final({0: [(0, "p-0.1-0"), (1, "p-9.1-0")]}).check()
    assert kinds(report) == {"unknown-value"}


def test_nonmonotonic_send_offsets_backwards_in_send_order() -> None:
    h = History().send("p-0.1", "p-0.1-0", 0, 5).send("p-0.1", "p-0.1-1", 0, 4)
    report = h.final({0: [(4, "p-0.1-1"), (5, "p-0.1-0")]}).check()
    assert kinds(report) == {"nonmonotonic-send"}
    assert "p-0.1-1 sent after p-0.1-0" in report.anomalies[0].message


def test_nonmonotonic_poll_without_rebalance() -> None:
    h = History().send("p-0.1", "a", 0, 0).send("p-0.1", "b", 0, 1)
    h.poll("c-0.1", (0, 0, "a"), (0, 1, "b")).poll("c-0.1", (0, 1, "b"))
    report = h.final({0: [(0, "a"), (1, "b")]}).check()
    assert kinds(report) == {"nonmonotonic-poll"}


def test_poll_going_back_after_a_rebalance_is_fine() -> None:
    h = History().send("p-0.1", "a", 0, 0).send("p-0.1", "b", 0, 1)
    h.poll("c-0.1", (0, 0, "a"), (0, 1, "b"))
    h.op("c-0.1", "ok", "assign", partitions=[0])
    h.poll("c-0.1", (0, 0, "a"))
    assert h.final({0: [(0, "a"), (1, "b")]}).check().valid


def test_poll_skip_over_a_visible_record() -> None:
    h = History().send("p-0.1", "a", 0, 0).send("p-0.1", "b", 0, 1).send("p-0.1", "c", 0, 2)
    h.poll("c-0.1", (0, 0, "a")).poll("c-0.1", (0, 2, "c"))
    report = h.final({0: [(0, "a"), (1, "b"), (2, "c")]}).check()
    assert kinds(report) == {"poll-skip"}
    assert "first 1 (b)" in report.anomalies[0].message


def test_poll_over_aborted_records_and_markers_is_no_skip() -> None:
    h = History().send("p-0.1", "a", 0, 0)
    h.txn("t-0.1", "t-0.1#0", [("x", 0, 1)], end="abort")
    h.send("p-0.1", "c", 0, 3).poll("c-0.1", (0, 0, "a")).poll("c-0.1", (0, 3, "c"))
    assert h.final({0: [(0, "a"), (3, "c")]}).check().valid


def group_history() -> History:
    """c-0 reads a and b and commits 2; c-1 takes partition 0 over."""
    h = History().send("p-0.1", "a", 0, 0).send("p-0.1", "b", 0, 1).send("p-0.1", "c", 0, 2)
    h.send("p-0.1", "d", 0, 3)
    h.op("c-0.1", "ok", "assign", partitions=[0], added=[0], group="g")
    h.poll("c-0.1", (0, 0, "a"), (0, 1, "b"))
    h.op("c-0.1", "invoke", "commit-offsets", offsets={"0": 2}, group="g")
    h.op("c-0.1", "ok", "commit-offsets", offsets={"0": 2}, group="g")
    h.op("c-0.1", "ok", "revoke", partitions=[0], group="g")
    h.op("c-1.1", "ok", "assign", partitions=[0], added=[0], group="g")
    return h


def test_group_member_starting_at_the_committed_offset_is_fine() -> None:
    h = group_history().poll("c-1.1", (0, 2, "c"), (0, 3, "d"))
    assert h.final({0: [(0, "a"), (1, "b"), (2, "c"), (3, "d")]}).check().valid


def test_group_skip_records_no_member_polled() -> None:
    h = group_history().poll("c-1.1", (0, 3, "d"))
    report = h.final({0: [(0, "a"), (1, "b"), (2, "c"), (3, "d")]}).check()
    assert kinds(report) == {"group-skip"}
    message = report.anomalies[0].message
    assert "1 visible record(s) below offset 3" in message and "first 2 (c)" in message
    assert report.anomalies[0].ops[0].process == "c-1.1"


def test_group_skip_ignores_consumers_outside_the_group() -> None:
    h = group_history().poll("c-1.1", (0, 2, "c"), (0, 3, "d"))
    h.op("t-0.1", "ok", "assign", partitions=[0])  # a manual assignment, from the end
    h.poll("t-0.1", (0, 3, "d"))
    assert h.final({0: [(0, "a"), (1, "b"), (2, "c"), (3, "d")]}).check().valid


def test_g0_write_cycle() -> None:
    """T1 then T2 on partition 0, T2 then T1 on partition 1."""
    h = History()
    h.txn("t-0.1", "T1", [("t1-a", 0, 0), ("t1-b", 1, 1)])
    h.txn("t-1.1", "T2", [("t2-a", 0, 1), ("t2-b", 1, 0)])
    report = h.final({0: [(0, "t1-a"), (1, "t2-a")], 1: [(0, "t2-b"), (1, "t1-b")]}).check()
    assert kinds(report) == {"G0"}
    message = report.anomalies[0].message
    assert "-ww->" in message and "-wr->" not in message


def test_g1c_cycle_through_a_read() -> None:
    """T2 wrote partition 0 before T1 did, yet read what T1 wrote to partition 1."""
    h = History()
    h.txn("t-0.1", "T1", [("t1-a", 0, 1), ("t1-b", 1, 0)])
    h.txn("t-1.1", "T2", [("t2-a", 0, 0)], reads=[[1, 0, "t1-b"]])
    report = h.final({0: [(0, "t2-a"), (1, "t1-a")], 1: [(0, "t1-b")]}).check()
    assert kinds(report) == {"G1c"}
    assert "T1 -wr-> T2" in report.anomalies[0].message


def test_no_cycle_between_aborted_or_serial_transactions() -> None:
    h = History()
    h.txn("t-0.1", "T1", [("t1-a", 0, 0)])
    h.txn("t-1.1", "T2", [("t2-a", 0, 1)], reads=[[0, 0, "t1-a"]])
    h.txn("t-0.1", "T3", [("t3-a", 0, 2)], reads=[[0, 1, "t2-a"]])
    assert h.final({0: [(0, "t1-a"), (1, "t2-a"), (2, "t3-a")]}).check().valid


def test_every_kind_is_tested() -> None:
    covered = {
        "lost-write",
        "duplicate",
        "inconsistent-offset",
        "aborted-read",
        "unknown-value",
        "nonmonotonic-send",
        "nonmonotonic-poll",
        "poll-skip",
        "group-skip",
        "G0",
        "G1c",
    }
    assert covered == set(KINDS)


def test_tarjan_finds_a_cycle_in_a_long_chain_without_recursion() -> None:
    nodes = list(range(5000))
    edges = [Edge(i, i + 1, "ww", "") for i in range(4999)] + [Edge(4999, 0, "wr", "")]
    (cycle,) = find_cycles(nodes, edges)
    assert len(cycle) == 5000


def test_history_files_round_trip_and_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    write_history(path, merge([clean().ops]))
    assert check(load_history(path)).valid
    with open(path, "a") as out:
        out.write('{"process": "p-0.1", "cli')
    with pytest.raises(HistoryError, match="not JSON"):
        read_lines(path)
    assert len(read_lines(path, allow_torn_tail=True)) == len(clean().ops)


def test_bad_lines_get_a_specific_error(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"process": "a", "client": "a", "type": "done", "f": "send"}) + "\n")
    with pytest.raises(HistoryError, match="type 'done'"):
        load_history(path)
    path.write_text(json.dumps({"process": "a", "client": "a", "type": "ok"}) + "\n")
    with pytest.raises(HistoryError, match="missing f"):
        load_history(path)


def test_cli_check_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.jsonl"
    write_history(path, merge([clean().ops]))
    assert main(["check", str(path)]) == 0
    bad = History().send("p-0.1", "p-0.1-0", 0, 0).final({0: []})
    write_history(path, merge([bad.ops]))
    assert main(["check", str(path)]) == 1
    assert "lost-write: 1" in capsys.readouterr().out
