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
                found.append(Anomaly("nonmonotonic-poll", message, [before_op, op]))
                continue
            skipped = visible.between(p, before + 1, offset)
            if skipped:
                found.append(
                    Anomaly(
                        "poll-skip",
                        f"{op.process} partition {p}: polled {before} then {offset}, skipping "
                        f"{len(skipped)} visible record(s), first {skipped[0]} ({final[p][skipped[0]]})",
                        [before_op, op],
                    )
                )
    return found


def group_skips(ops: list[Op], final: Final) -> list[Anomaly]:
    """``group-skip``: after a group assignment, a member's first poll of a partition it was
    given (``added``) must not start past visible records the group never committed past.

    The bound is the highest offset any member had *asked* to commit for the partition before
    that first poll (0 without one: the workload's consumers reset to the earliest offset). Asked,
    not acknowledged: a commit whose answer was lost may still have been written, so only a start
    beyond every commit anyone attempted is certainly a skip.
    """
    visible = _Visible(final)
    committed: dict[str, dict[int, tuple[int, Op | None]]] = defaultdict(dict)  # group -> p -> bound
    pending: dict[str, tuple[str, set[int], Op]] = {}  # process -> (group, partitions to check, assign)
    found = []
    for op in ops:
        group = op.fields.get("group")
        if op.f == "commit-offsets" and op.type == "invoke" and group:
            for p, offset in op.fields["offsets"].items():
                best = committed[group].get(int(p))
                if best is None or int(offset) > best[0]:
                    committed[group][int(p)] = (int(offset), op)
        elif op.f == "assign" and op.type == "ok" and group:
            added = op.fields.get("added", op.fields["partitions"])
            previous = pending.get(op.process)
            unchecked = {int(p) for p in added} | (previous[1] if previous else set())
            pending[op.process] = (group, unchecked, op)
        elif op.f == "revoke" and op.type == "ok" and op.process in pending:
            pending[op.process][1].difference_update(int(p) for p in op.fields["partitions"])
        elif op.f == "poll" and op.type == "ok" and op.process in pending:
            group, unchecked, assign = pending[op.process]
            for p, offset, value in op.fields["records"]:
                p, offset = int(p), int(offset)
                if p not in unchecked:
                    continue
                unchecked.discard(p)
                bound, commit = committed[group].get(p, (0, None))
                skipped = visible.between(p, bound, offset)
                if skipped:
                    evidence = [assign, *([commit] if commit else []), op]
                    found.append(
                        Anomaly(
                            "group-skip",
                            f"{op.process} partition {p}: first poll after its assignment at {offset} "
                            f"({value}), but the group had committed only up to {bound}: "
                            f"{len(skipped)} visible record(s) skipped, first {skipped[0]}",
                            evidence,
                        )
                    )
    return found
