"""The checker: anomalies in a history, each with the operations that show it.

What counts as what (values are unique per send, so every read names its send):

* ``lost-write``: an acknowledged send (outside a transaction, or in a committed one) whose value
  the final read_committed read of every partition does not contain;
* ``duplicate``: one value at two (partition, offset) places, by any reads or acknowledgements;
* ``inconsistent-offset``: one (partition, offset) holding two values across reads and acks;
* ``aborted-read``: a read returned a value of an aborted transaction (abort acknowledged, or the
  commit never even invoked, so the coordinator can only have aborted it) or of a failed send;
* ``unknown-value``: a read returned a value no one sent;
* ``nonmonotonic-send``: one producer process's acknowledged offsets on a partition going
  backwards in the order it invoked the sends;
* ``nonmonotonic-poll``: one consumer process's polled offsets on a partition not increasing
  without an assignment change (rebalance or seek) in between;
* ``poll-skip``: consecutive polls of a partition by one process jump over an offset where the
  final read found a visible value, without an assignment change in between;
* ``group-skip``: a visible record below the furthest offset a consumer group reached on a
  partition that no member of the group ever polled;
* ``G0`` / ``G1c``: dependency cycles between committed transactions (see ``cycles.py``).

Transactions whose outcome is unknown (commit timed out, process killed during the commit) are
neither lost nor aborted: whatever the final read shows decides them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tools.anomaly.cycles import Edge, classify, find_cycles
from tools.anomaly.findings import Anomaly
from tools.anomaly.history import Op
from tools.anomaly.poll_checks import group_skips, poll_order

KINDS = (
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
)
COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"


@dataclass
class Report:
    anomalies: list[Anomaly]
    stats: dict[str, int]
    warnings: list[str]

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def by_kind(self) -> dict[str, list[Anomaly]]:
        found: dict[str, list[Anomaly]] = {}
        for anomaly in self.anomalies:
            found.setdefault(anomaly.kind, []).append(anomaly)
        return found

    def render(self, examples: int = 3) -> str:
        lines = ["history: " + ", ".join(f"{key} {value}" for key, value in self.stats.items())]
        lines += [f"warning: {warning}" for warning in self.warnings]
        for kind, found in self.by_kind().items():
            lines.append(f"{kind}: {len(found)}")
            lines += [anomaly.render() for anomaly in found[:examples]]
        lines.append("valid: no anomalies" if self.valid else f"INVALID: {len(self.anomalies)} anomalies")
        return "\n".join(lines)


@dataclass
class _Send:
    invoke: Op
    done: Op | None = None


class _History:
    """The history indexed for the checks: sends by value, transactions and their outcomes."""

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops
        self.sends: dict[str, _Send] = {}
        self.txn_ops: dict[str, list[Op]] = defaultdict(list)
        self.final: dict[int, dict[int, str]] | None = None
        self.final_op: Op | None = None
        for op in ops:
            if op.f == "send":
                value = op.fields["value"]
                if op.type == "invoke":
                    self.sends[value] = _Send(op)
                elif value in self.sends:
                    self.sends[value].done = op
            if op.f.startswith("txn-") or (op.f in ("send", "poll") and op.fields.get("txn")):
                self.txn_ops[op.fields["txn"]].append(op)
            if op.f == "final-read":
                self.final_op = op
                self.final = {
                    int(p): {int(offset): value for offset, value in records}
                    for p, records in op.fields["partitions"].items()
                }
        self.final_place = {
            value: (p, offset)
            for p, records in (self.final or {}).items()
            for offset, value in records.items()
        }
        self.outcome = {txn: self._outcome(txn_ops) for txn, txn_ops in self.txn_ops.items()}

    def _outcome(self, txn_ops: list[Op]) -> str:
        commits = [op for op in txn_ops if op.f == "txn-commit"]
        if any(op.type == "ok" for op in commits):
            return COMMITTED
        commit_unknown = any(op.type == "invoke" for op in commits) and not any(
            op.type == "fail" for op in commits
        )
        if commit_unknown:
            return self._observed(txn_ops)
        # Commit never invoked or certainly failed: only an abort can have ended it.
        return ABORTED

    def _observed(self, txn_ops: list[Op]) -> str:
        values = [op.fields["value"] for op in txn_ops if op.f == "send" and op.type == "invoke"]
        return COMMITTED if any(value in self.final_place for value in values) else UNKNOWN

    def send_txn(self, value: str) -> str | None:
        send = self.sends.get(value)
        return send.invoke.fields.get("txn") if send else None

    def reads(self) -> Iterable[tuple[int, int, str, Op]]:
        """Every (partition, offset, value) a poll or the final read returned, with its op."""
        for op in self.ops:
            if op.f == "poll" and op.type == "ok":
                for p, offset, value in op.fields["records"]:
                    yield int(p), int(offset), value, op
        if self.final_op is not None and self.final is not None:
            for p, records in self.final.items():
                for offset, value in records.items():
                    yield p, offset, value, self.final_op


def check(ops: list[Op]) -> Report:
    history = _History(ops)
    anomalies: list[Anomaly] = []
    warnings: list[str] = []
    if history.final is None:
        warnings.append("no final-read: lost writes and poll skips not checked")
    anomalies += _lost_writes(history)
    anomalies += _places(history)
    anomalies += _bad_reads(history)
    anomalies += _nonmonotonic_sends(history)
    anomalies += poll_order(history.ops, history.final or {})
    anomalies += group_skips(history.ops, history.final or {})
    anomalies += _cycles(history)
    return Report(anomalies, _stats(history), warnings)


def _lost_writes(history: _History) -> list[Anomaly]:
    if history.final is None:
        return []
    found = []
    for value, send in history.sends.items():
        if send.done is None or send.done.type != "ok" or value in history.final_place:
            continue
        txn = send.invoke.fields.get("txn")
        if txn is not None and history.outcome.get(txn) != COMMITTED:
            continue
        where = f"partition {send.done.fields.get('partition')} offset {send.done.fields.get('offset')}"
        context = f"in committed {txn}" if txn else "outside a transaction"
        commit = [op for op in history.txn_ops.get(txn, []) if op.f == "txn-commit"] if txn else []
        found.append(
            Anomaly(
                "lost-write",
                f"{value} acknowledged at {where} ({context}), absent from the final read",
                [send.invoke, send.done, *commit],
            )
        )
    return found


def _places(history: _History) -> list[Anomaly]:
    """Duplicates and inconsistent offsets, from reads and acknowledgements together."""
    places: dict[str, dict[tuple[int, int], Op]] = defaultdict(dict)
    values: dict[tuple[int, int], dict[str, Op]] = defaultdict(dict)
    for p, offset, value, op in history.reads():
        places[value].setdefault((p, offset), op)
        values[(p, offset)].setdefault(value, op)
    for value, send in history.sends.items():
        if send.done is not None and send.done.type == "ok" and send.done.fields.get("offset", -1) >= 0:
            place = (int(send.done.fields["partition"]), int(send.done.fields["offset"]))
            places[value].setdefault(place, send.done)
            values[place].setdefault(value, send.done)
    found = []
    for value, where in places.items():
        if len(where) > 1:
            spots = ", ".join(f"{p}:{o}" for p, o in sorted(where))
            found.append(Anomaly("duplicate", f"{value} at {spots}", list(where.values())))
    for (p, offset), seen in values.items():
        if len(seen) > 1:
            found.append(
                Anomaly(
                    "inconsistent-offset",
                    f"partition {p} offset {offset} holds {', '.join(sorted(seen))}",
                    list(seen.values()),
                )
            )
    return found


def _bad_reads(history: _History) -> list[Anomaly]:
    found = []
    reported: set[str] = set()
    for p, offset, value, op in history.reads():
        if value in reported:
            continue
        send = history.sends.get(value)
        if send is None:
            reported.add(value)
            found.append(Anomaly("unknown-value", f"{value} read at {p}:{offset} was never sent", [op]))
            continue
        txn = send.invoke.fields.get("txn")
        failed = send.done is not None and send.done.type == "fail"
        aborted = txn is not None and history.outcome.get(txn) == ABORTED
        if failed or aborted:
            reported.add(value)
            why = f"its transaction {txn} aborted" if aborted else "its send failed"
            evidence = [op for op in history.txn_ops.get(txn, []) if op.f.startswith("txn-")] if txn else []
            done = [send.done] if send.done else []
            found.append(
                Anomaly(
                    "aborted-read",
                    f"{value} read at {p}:{offset} but {why}",
                    [op, send.invoke, *done, *evidence],
                )
            )
    return found


def _nonmonotonic_sends(history: _History) -> list[Anomaly]:
    last: dict[tuple[str, int], Op] = {}
    found = []
    for send in sorted(history.sends.values(), key=lambda s: s.invoke.index):
        done = send.done
        if done is None or done.type != "ok" or done.fields.get("offset", -1) < 0:
            continue
        key = (send.invoke.process, int(done.fields["partition"]))
        previous = last.get(key)
        if previous is not None and int(done.fields["offset"]) <= int(previous.fields["offset"]):
            found.append(
                Anomaly(
                    "nonmonotonic-send",
                    f"{send.invoke.process} partition {key[1]}: {done.fields['value']} sent after "
                    f"{previous.fields['value']} but acknowledged at offset {done.fields['offset']} "
                    f"<= {previous.fields['offset']}",
                    [previous, send.invoke, done],
                )
            )
        last[key] = done
    return found


def _cycles(history: _History) -> list[Anomaly]:
    committed = [txn for txn, outcome in history.outcome.items() if outcome == COMMITTED]
    is_committed = set(committed)
    edges: list[Edge] = []
    for p, records in sorted((history.final or {}).items()):
        previous: tuple[str, str] | None = None
        for offset in sorted(records):
            value = records[offset]
            txn = history.send_txn(value)
            if txn is None or txn not in is_committed:
                continue
            if previous is not None and previous[0] != txn:
                edges.append(Edge(previous[0], txn, "ww", f"{previous[1]} then {value} on partition {p}"))
            previous = (txn, value)
    for reader in committed:
        for op in history.txn_ops[reader]:
            if op.f != "poll" or op.type != "ok":
                continue
            for _, _, value in op.fields["records"]:
                writer = history.send_txn(value)
                if writer is not None and writer != reader and writer in is_committed:
                    edges.append(Edge(writer, reader, "wr", f"{reader} read {value}"))
    found = []
    for cycle in find_cycles(committed, _dedupe(edges)):
        steps = "; ".join(f"{e.source} -{e.kind}-> {e.target} ({e.why})" for e in cycle)
        txns = {str(edge.source) for edge in cycle}
        evidence = [op for txn in txns for op in history.txn_ops[txn] if op.f == "txn-commit"]
        found.append(Anomaly(classify(cycle), f"cycle: {steps}", evidence))
    return found


def _dedupe(edges: list[Edge]) -> list[Edge]:
    seen: dict[tuple[Any, Any, str], Edge] = {}
    for edge in edges:
        seen.setdefault((edge.source, edge.target, edge.kind), edge)
    return list(seen.values())


def _stats(history: _History) -> dict[str, int]:
    outcomes = list(history.outcome.values())
    done = [send.done.type if send.done else "none" for send in history.sends.values()]
    return {
        "ops": len(history.ops),
        "sends": len(history.sends),
        "acked": done.count("ok"),
        "send-indeterminate": done.count("info") + done.count("none"),
        "txns-committed": outcomes.count(COMMITTED),
        "txns-aborted": outcomes.count(ABORTED),
        "txns-unknown": outcomes.count(UNKNOWN),
        "polled": sum(len(op.fields["records"]) for op in history.ops if op.f == "poll" and op.type == "ok"),
        "final-read": len(history.final_place),
        "faults": sum(1 for op in history.ops if op.f == "nemesis" and op.fields.get("phase") == "start"),
    }
