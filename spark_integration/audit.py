"""Audit a pipeline's output against its input: read both topics back (read_committed) and
count what is missing, duplicated or unexpected, and which keys' outputs are out of order."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Record = tuple[bytes | None, bytes | None]


@dataclass(frozen=True)
class AuditReport:
    """Counts over the records of both topics; ``ok`` when output == transform(input)."""

    input_records: int
    output_records: int
    expected_records: int
    missing: int
    duplicates: int
    unexpected: int
    out_of_order_keys: int

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicates or self.unexpected or self.out_of_order_keys)


def read_all(bootstrap_servers: str, topic: str, isolation_level: str = "read_committed",
             timeout_s: float = 60) -> list[Any]:
    """Every record of ``topic`` visible at ``isolation_level`` now, by partition then offset."""
    # Imported here: the package imports this module, and most processes that import the
    # package (Spark's Python workers) never audit.
    from sdk.client.cluster import TopicPartition
    from sdk.sync import Consumer

    with Consumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                  isolation_level=isolation_level, auto_offset_reset="earliest") as consumer:
        partitions = None
        deadline = time.monotonic() + 10
        while partitions is None and time.monotonic() < deadline:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(partitions or ())]
        if not tps:
            return []
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        consumer.seek_to_beginning(*tps)
        records: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for batch in consumer.getmany(timeout_ms=300).values():
                records.extend(r for r in batch if r.offset < ends[TopicPartition(r.topic, r.partition)])
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} up to {ends}")
    records.sort(key=lambda r: (r.partition, r.offset))
    return records


def audit(
    bootstrap_servers: str,
    input_topic: str,
    output_topic: str,
    transform: Callable[[bytes | None, bytes | None], Iterable[Record]] = lambda k, v: [(k, v)],
) -> AuditReport:
    """Compare ``output_topic`` with ``transform`` applied to every record of ``input_topic``.

    Per-key order: for each output key, its outputs in output offset order must be the expected
    outputs in input offset order (checked for keys whose records are complete and unduplicated).
    """
    inputs = read_all(bootstrap_servers, input_topic)
    outputs = read_all(bootstrap_servers, output_topic)
    expected_by_key: dict[Any, list[Any]] = defaultdict(list)
    for record in inputs:
        for key, value in transform(record.key, record.value):
            expected_by_key[key].append(value)
    actual_by_key: dict[Any, list[Any]] = defaultdict(list)
    for record in outputs:
        actual_by_key[record.key].append(record.value)
    expected = Counter((k, v) for k, values in expected_by_key.items() for v in values)
    actual = Counter((r.key, r.value) for r in outputs)
    missing = sum(max(0, n - actual[item]) for item, n in expected.items())
    duplicates = sum(max(0, actual[item] - n) for item, n in expected.items())
    unexpected = sum(n for item, n in actual.items() if item not in expected)
    out_of_order = sum(
        1 for key, values in expected_by_key.items()
        if Counter(actual_by_key.get(key, [])) == Counter(values) and actual_by_key[key] != values
    )
    return AuditReport(len(inputs), len(outputs), sum(expected.values()), missing, duplicates, unexpected,
                       out_of_order)
