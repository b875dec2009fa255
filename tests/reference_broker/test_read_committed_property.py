"""Property: under read_committed, a consumer reads exactly the committed records, in offset order.

Hypothesis draws interleavings of plain writes and transactional producers' writes, commits and
aborts into a topic whose segments hold a few hundred bytes (so transactions span many segment
rolls), optionally leaves a transaction open (its records and everything after its first offset
must then stay invisible: the last stable offset), and a fetch size down to one batch.
confluent-kafka's and the SDK's read_committed consumers must both return the committed records
below the last stable offset, each once, in offset order. One broker process serves the module;
each example has its own topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import confluent_kafka
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_broker.testing import BrokerProcess
from tests.reference_broker.read_committed_helpers import (
    TXN_BROKER,
    create_topic,
    read_committed_confluent,
    read_committed_sdk,
    unique,
)

TRANSACTIONAL_PRODUCERS = 3


@pytest.fixture(scope="module")
def txn_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(config=TXN_BROKER) as proc:
        yield proc


# Steps: ("plain", records, value size), ("send", producer, records, value size),
# ("end", producer, commit?).
producer_index = st.integers(0, TRANSACTIONAL_PRODUCERS - 1)
records = st.integers(1, 6)
value_size = st.integers(10, 150)
step = st.one_of(
    st.tuples(st.just("plain"), records, value_size),
    st.tuples(st.just("send"), producer_index, records, value_size),
    st.tuples(st.just("send"), producer_index, records, value_size),
    st.tuples(st.just("end"), producer_index, st.booleans()),
)


@dataclass
class Written:
    """What the example wrote: offsets of committed records, and of open transactions."""

    committed: dict[int, bytes] = field(default_factory=dict)
    pending: dict[int, dict[int, bytes]] = field(default_factory=dict)  # producer -> offset -> value

    def first_open_offset(self) -> int | None:
        firsts = [min(values) for values in self.pending.values() if values]
        return min(firsts) if firsts else None


class Writers:
    """A plain producer and lazily created transactional ones, writing one step at a time and
    waiting for each step's records to be acknowledged, so the log's order is the steps' order."""

    def __init__(self, bootstrap: str, topic: str, segment_bytes: int):
        self.bootstrap, self.topic = bootstrap, topic
        # A batch larger than a segment is refused (RECORD_LIST_TOO_LARGE): one step's records
        # (one batch at most) stay below the segment size.
        self.step_bytes = segment_bytes - 120
        self.plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                                               "log_level": 0})
        self.transactional: dict[int, confluent_kafka.Producer] = {}
        self.written = Written()
        self.counter = 0

    def _produce(self, producer: confluent_kafka.Producer, count: int, size: int) -> dict[int, bytes]:
        acked: dict[int, bytes] = {}
        size = max(8, min(size, self.step_bytes // count))

        def delivered(err: object, msg: confluent_kafka.Message) -> None:
            assert err is None, err
            acked[msg.offset()] = msg.value()

        for _ in range(count):
            self.counter += 1
            value = (b"%d:" % self.counter).ljust(size, b"v")
            producer.produce(self.topic, value, partition=0, on_delivery=delivered)
        assert producer.flush(30) == 0
        assert len(acked) == count
        return acked

    def _txn_producer(self, index: int) -> confluent_kafka.Producer:
        producer = self.transactional.get(index)
        if producer is None:
            producer = self.transactional[index] = confluent_kafka.Producer({
                "bootstrap.servers": self.bootstrap, "transactional.id": unique("tid"),
                "linger.ms": 0, "log_level": 0,
            })
            producer.init_transactions(30)
        return producer

    def run(self, step: tuple) -> None:
        kind = step[0]
        if kind == "plain":
            self.written.committed.update(self._produce(self.plain, step[1], step[2]))
        elif kind == "send":
            producer = self._txn_producer(step[1])
            if step[1] not in self.written.pending:
                producer.begin_transaction()
                self.written.pending[step[1]] = {}
            self.written.pending[step[1]].update(self._produce(producer, step[2], step[3]))
        elif step[1] in self.written.pending:
            producer = self.transactional[step[1]]
            values = self.written.pending.pop(step[1])
            if step[2]:
                producer.commit_transaction(30)
                self.written.committed.update(values)
            else:
                producer.abort_transaction(30)

    def end_all(self, commit: bool) -> None:
        for index in list(self.written.pending):
            self.run(("end", index, commit))

    def close(self) -> None:
        """Abort what is still open, so no transaction outlives the example."""
        for index in list(self.written.pending):
            self.transactional[index].abort_transaction(30)
        self.written.pending.clear()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=1, max_size=24),
    segment_bytes=st.sampled_from([300, 500, 900, 2000, 1 << 20]),
    fetch_bytes=st.sampled_from([None, 1, 300, 1500]),
    leave_open=st.booleans(),
    final_commit=st.booleans(),
)
def test_read_committed_returns_exactly_the_committed_records_in_order(
    txn_broker: BrokerProcess, steps: list[tuple], segment_bytes: int, fetch_bytes: int | None,
    leave_open: bool, final_commit: bool,
) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, unique("rc-prop"), segment_bytes=segment_bytes)
    writers = Writers(bootstrap, topic, segment_bytes)
    try:
        for s in steps:
            writers.run(s)
        if not leave_open:
            writers.end_all(final_commit)
        written = writers.written
        stable_end = written.first_open_offset()
        expected = [(0, offset, value) for offset, value in sorted(written.committed.items())
                    if stable_end is None or offset < stable_end]
        for reader in (read_committed_confluent, read_committed_sdk):
            got = reader(bootstrap, topic, 1, len(expected), fetch_bytes=fetch_bytes, timeout=30)
            assert got == expected, reader.__name__
    finally:
        writers.close()
