"""The consumers' side: what one consumer process polled, partition by partition.

``final`` is the final read (partition -> offset -> value): the records a read_committed reader
must see. Offsets missing from it (aborted records, transaction markers) may be passed over.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from tools.anomaly.findings import Anomaly
from tools.anomaly.history import Op

Final = dict[int, dict[int, str]]


def _distinct(*ops: Op) -> list[Op]:
    """The operations once each (two records of one poll name the same poll)."""
    return list({id(op): op for op in ops}.values())


class _Visible:
    """The final read's offsets per partition, sorted once, for range queries."""

    def __init__(self, final: Final) -> None:
        self.final = final
        self.offsets = {p: sorted(records) for p, records in final.items()}

    def between(self, partition: int, low: int, high: int) -> list[int]:
        """Visible offsets of ``partition`` in ``[low, high)``."""
        offsets = self.offsets.get(partition, [])
        return offsets[bisect.bisect_left(offsets, low) : bisect.bisect_left(offsets, high)]


def poll_order(ops: list[Op], final: Final) -> list[Anomaly]:
    """``nonmonotonic-poll`` and ``poll-skip`` between consecutive polls of a partition by one
    process; an assignment (rebalance, seek) in between resets what is expected."""
    visible = _Visible(final)
    last: dict[str, dict[int, tuple[int, Op]]] = defaultdict(dict)
    found = []
    for op in ops:
        if op.f in ("assign", "revoke") and op.type == "ok":
            last[op.process].clear()
            continue
        if op.f != "poll" or op.type != "ok":
            continue
        seen = last[op.process]
        for p, offset, value in op.fields["records"]:
            p, offset = int(p), int(offset)
            previous = seen.get(p)
            seen[p] = (offset, op)
            if previous is None:
                continue
            before, before_op = previous
            if offset <= before:
                message = f"{op.process} partition {p}: polled offset {offset} ({value}) after {before}"
                found.append(Anomaly("nonmonotonic-poll", message, _distinct(before_op, op)))
                continue
            skipped = visible.between(p, before + 1, offset)
            if skipped:
                found.append(
                    Anomaly(
                        "poll-skip",
                        f"{op.process} partition {p}: polled {before} then {offset}, skipping "
                        f"{len(skipped)} visible record(s), first {skipped[0]} ({final[p][skipped[0]]})",
                        _distinct(before_op, op),
                    )
                )
    return found


def group_skips(ops: list[Op], final: Final) -> list[Anomaly]:
    """``group-skip``: a visible record below the furthest offset a consumer group reached on a
    partition that no member of the group ever polled.

    Members poll, then commit the positions that follow their polls, and a new owner starts at
    the last commit (the workload's consumers reset to the earliest offset without one), so
    between them the group's members see every visible record up to where they got, at least
    once. A hole means a member's position jumped past records nobody had read (a committed
    offset beyond what was read, a wrong position after a rebalance or a restart).
    """
    visible = _Visible(final)
    group_of = {op.process: op.fields["group"] for op in ops if op.f == "assign" and op.fields.get("group")}
    polled: dict[tuple[str, int], dict[int, Op]] = defaultdict(dict)
    for op in ops:
        if op.f == "poll" and op.type == "ok" and op.process in group_of:
            for p, offset, _ in op.fields["records"]:
                polled[(group_of[op.process], int(p))].setdefault(int(offset), op)
    found = []
    for (group, p), seen in sorted(polled.items()):
        furthest = max(seen)
        missed = [offset for offset in visible.between(p, 0, furthest) if offset not in seen]
        if not missed:
            continue
        after = sorted(offset for offset in seen if offset > missed[0])
        jump = seen[after[0]]
        found.append(
            Anomaly(
                "group-skip",
                f"group {group} partition {p}: {len(missed)} visible record(s) below offset {furthest} "
                f"never polled by any member, first {missed[0]} ({final[p][missed[0]]}); the first "
                f"poll past it returned offset {after[0]}",
                [jump],
            )
        )
    return found
