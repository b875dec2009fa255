"""The history: every operation of a run, one JSON object per line.

An operation is what one client process did or saw, stamped when it happened. Writes and
transaction ends come in pairs, as in Jepsen: an ``invoke`` line when the client starts the call
and a completion line, ``ok`` (it happened), ``fail`` (it certainly did not) or ``info`` (the
outcome is unknown: a timeout, a lost connection, a process killed before the answer). Reads,
assignments and nemesis faults are single ``ok``/``info`` lines.

Line format (keys always present; ``fields`` depends on ``f``)::

    {"index": 12, "process": "txn-1.2", "client": "txn-1", "type": "ok", "f": "send",
     "time": 1764265200.123, "mono": 8812.5, "fields": {"value": "txn-1.2-7", ...}}

* ``process`` is one incarnation of a client: a killed client comes back as a new process
  (``txn-1.2`` after ``txn-1.1``) under the same ``client`` (which keeps its transactional id).
* ``time`` is the wall clock (seconds since the epoch), ``mono`` the machine's monotonic clock
  (seconds; one clock for all processes of the machine, so histories of several processes merge
  by it), ``index`` the position in the merged history.

The ``f`` values and their fields:

* ``send``: invoke ``{value, txn}``; ok ``{value, txn, partition, offset}``; fail/info
  ``{value, txn, error}``. ``txn`` is the transaction's id or None outside a transaction.
* ``txn-begin`` ok ``{txn}``; ``txn-commit`` / ``txn-abort`` invoke, then ok/fail/info ``{txn}``.
* ``poll`` ok ``{records: [[partition, offset, value], ...], txn}``: what one poll returned
  (``txn`` set when a transactional client read inside its transaction).
* ``commit-offsets`` invoke/ok/fail/info ``{offsets: {partition: offset}, group}``.
* ``assign`` ok ``{partitions: [...], added: [...], group}``: the consumer's whole assignment
  after a rebalance and the partitions new to it (``group`` absent for a manual ``assign()``);
  ``revoke`` ok ``{partitions: [...], group}``: partitions it gave up (or lost).
* ``final-read`` ok ``{partitions: {partition: [[offset, value], ...]}}``: one read_committed read
  of every partition from its beginning to its end, after the workload and its faults ended.
* ``nemesis`` info ``{fault, target, phase}``: a fault started or healed.

Values are strings unique to one send (``<process>-<seq>``), so a read names the send it came from.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

OP_TYPES = frozenset({"invoke", "ok", "fail", "info"})
FUNCTIONS = frozenset(
    {
        "send",
        "txn-begin",
        "txn-commit",
        "txn-abort",
        "poll",
        "commit-offsets",
        "assign",
        "revoke",
        "final-read",
        "nemesis",
    }
)


class HistoryError(ValueError):
    """A history line that is not an operation (says which line and why)."""


@dataclass
class Op:
    process: str
    client: str
    type: str
    f: str
    fields: dict[str, Any] = field(default_factory=dict)
    time: float = 0.0
    mono: float = 0.0
    index: int = -1

    def to_json(self) -> str:
        return json.dumps(
            {
                "index": self.index,
                "process": self.process,
                "client": self.client,
                "type": self.type,
                "f": self.f,
                "time": self.time,
                "mono": self.mono,
                "fields": self.fields,
            },
            separators=(",", ":"),
        )

    def describe(self) -> str:
        """One line for a report: where it is in the history and what it was."""
        return f"#{self.index} {self.process} {self.type} {self.f} {json.dumps(self.fields)}"


def op_from_dict(data: Any, where: str) -> Op:
    if not isinstance(data, dict):
        raise HistoryError(f"{where}: an operation is a JSON object, not {type(data).__name__}")
    missing = {"process", "client", "type", "f"} - data.keys()
    if missing:
        raise HistoryError(f"{where}: missing {', '.join(sorted(missing))}")
    if data["type"] not in OP_TYPES:
        raise HistoryError(f"{where}: type {data['type']!r} is not one of {sorted(OP_TYPES)}")
    if data["f"] not in FUNCTIONS:
        raise HistoryError(f"{where}: f {data['f']!r} is not one of {sorted(FUNCTIONS)}")
    fields = data.get("fields", {})
    if not isinstance(fields, dict):
        raise HistoryError(f"{where}: fields must be an object")
    return Op(
        process=str(data["process"]),
        client=str(data["client"]),
        type=data["type"],
        f=data["f"],
        fields=fields,
        time=float(data.get("time", 0.0)),
        mono=float(data.get("mono", 0.0)),
        index=int(data.get("index", -1)),
    )


def read_lines(path: Path, *, allow_torn_tail: bool = False) -> list[Op]:
    """The operations of a JSON-lines file.

    ``allow_torn_tail``: the file was written by a process that may have been SIGKILLed mid-line,
    so an unparsable *last* line is dropped; anywhere else a bad line raises ``HistoryError``.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    ops = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if allow_torn_tail and number == len(lines):
                break
            raise HistoryError(f"{path}:{number}: not JSON ({exc})") from None
        ops.append(op_from_dict(data, f"{path}:{number}"))
    return ops


def merge(histories: Iterable[Iterable[Op]]) -> list[Op]:
    """One history of several processes' operations, in monotonic-clock order, indexed."""
    ops = sorted((op for history in histories for op in history), key=lambda op: op.mono)
    for index, op in enumerate(ops):
        op.index = index
    return ops


def write_history(path: Path, ops: Iterable[Op]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for op in ops:
            out.write(op.to_json() + "\n")


def load_history(path: Path) -> list[Op]:
    """A merged history file; operations without an index are numbered in file order."""
    ops = read_lines(path)
    for position, op in enumerate(ops):
        if op.index < 0:
            op.index = position
    return ops


class Recorder:
    """Appends one process's operations to its own file, each line flushed at once (a kill loses
    at most the line being written)."""

    def __init__(self, out: TextIO, process: str, client: str) -> None:
        self._out = out
        self.process = process
        self.client = client

    @classmethod
    def open(cls, path: Path, process: str, client: str) -> Recorder:
        return cls(open(path, "a", encoding="utf-8"), process, client)

    def record(self, type_: str, f: str, **fields: Any) -> Op:
        op = Op(self.process, self.client, type_, f, fields, time.time(), time.monotonic())
        self._out.write(op.to_json() + "\n")
        self._out.flush()
        return op

    def close(self) -> None:
        self._out.close()


def iter_ops(ops: Iterable[Op], f: str, type_: str | None = None) -> Iterator[Op]:
    return (op for op in ops if op.f == f and (type_ is None or op.type == type_))
