"""Reading a topic back the way a downstream application would: read_committed, to the end."""

from __future__ import annotations

import time

from sdk.client.cluster import TopicPartition
from sdk.consumer.records import ConsumerRecord
from sdk.sync import Consumer, Producer


def read_topic(bootstrap: str, topic: str, isolation_level: str = "read_committed") -> list[ConsumerRecord]:
    """Every record of ``topic`` (all partitions) visible at ``isolation_level``, in offset order."""
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation_level,
                  auto_offset_reset="earliest") as consumer:
        partitions = None
        deadline = time.monotonic() + 10
        while partitions is None and time.monotonic() < deadline:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(partitions or ())]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        consumer.seek_to_beginning(*tps)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for batch in consumer.getmany(timeout_ms=300).values():
                records.extend(batch)
            assert time.monotonic() < deadline, f"could not read {topic} to its end {ends}"
    return records


def produce(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records ``k<i>``/``v<i>``, i = 0..count-1."""
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
        producer.flush()
