"""Many rolled segments keep the broker's open descriptors bounded (Kafka's lazy segment files).

A topic with hundreds of small segments (``internal.segment.bytes``, Kafka's test-only size) is
written and read back from offset 0 while ``/proc/<pid>/fd`` of the broker is counted: only the
capped number of segments (``log.open.segments.max``) may hold files. Reads of old segments reopen
them, and a SIGKILL and restart loses nothing.
"""

from __future__ import annotations

import os
import resource
import select
import sys
import time
import uuid

import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess
from sdk.protocol import messages
from sdk.protocol.errors import ErrorCode
from sdk.records import RecordBatchBuilder, iter_batches
from tests.reference_broker.wire import WireClient, fetch_request

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/<pid>/fd")

OPEN_SEGMENTS = 16
BROKER_CONFIG: dict[str, object] = {"log.open.segments.max": OPEN_SEGMENTS}
TOPIC_CONFIG = {"internal.segment.bytes": "4096", "retention.ms": "-1"}
BATCHES = 600  # three per segment: about 200 segments, 800 files
#: descriptors the capped segments may hold (four files each) plus the test's own connections
ALLOWED_GROWTH = OPEN_SEGMENTS * 4 + 8


def open_descriptors(proc: BrokerProcess) -> int:
    return len(os.listdir(f"/proc/{proc.pid}/fd"))


def create_topic(proc: BrokerProcess, name: str) -> None:
    topic = messages.CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1,
        configs=[messages.CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                 for k, v in TOPIC_CONFIG.items()])
    with WireClient(proc.bootstrap) as wire:
        result = wire.request(messages.CreateTopicsRequest(topics=[topic], timeout_ms=10_000), 7).topics[0]
    assert result.error_code == 0, result.error_message


def value_of(i: int) -> bytes:
    return b"value-%06d-" % i + b"x" * 1200


def produce_all(proc: BrokerProcess, topic: str) -> None:
    with WireClient(proc.bootstrap) as wire:
        for i in range(BATCHES):
            builder = RecordBatchBuilder()
            builder.append(1_700_000_000_000 + i, None, value_of(i))
            request = messages.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                messages.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    messages.ProduceRequest.PartitionProduceData(index=0, records=builder.build())])])
            answer = wire.request(request, 9).responses[0].partition_responses[0]
            assert answer.error_code == 0 and answer.base_offset == i


def read_all(proc: BrokerProcess, topic: str) -> list[bytes]:
    """Every value from offset 0, fetched 32 KiB at a time (so every segment is opened)."""
    values: list[bytes] = []
    with WireClient(proc.bootstrap) as wire:
        while len(values) < BATCHES:
            answer = wire.request(fetch_request(topic, 0, len(values), max_bytes=32 * 1024), 12)
            part = answer.responses[0].partitions[0]
            assert part.error_code == ErrorCode.NONE
            got = [r.value for batch in iter_batches(bytes(part.records)) for r in batch
                   if r.offset >= len(values)]
            assert got, f"no progress at offset {len(values)}"
            values.extend(v for v in got if v is not None)
    return values


def test_many_segments_keep_descriptors_bounded_and_survive_kill(broker_factory: BrokerFactory) -> None:
    proc = broker_factory(BROKER_CONFIG)
    topic = f"fds-{uuid.uuid4().hex[:8]}"
    create_topic(proc, topic)
    baseline = open_descriptors(proc)
    produce_all(proc, topic)
    segments = len(list((proc.data_dir / f"{topic}-0").glob("*.log")))
    assert segments >= 150
    assert open_descriptors(proc) - baseline <= ALLOWED_GROWTH, f"{segments} segments"
    expected = [value_of(i) for i in range(BATCHES)]
    assert read_all(proc, topic) == expected
    assert open_descriptors(proc) - baseline <= ALLOWED_GROWTH
    # A well-behaved newcomer is still answered.
    with WireClient(proc.bootstrap) as wire:
        assert wire.request(messages.ApiVersionsRequest(), 0).error_code == 0

    proc.restart(kill=True)
    assert read_all(proc, topic) == expected
    assert open_descriptors(proc) - baseline <= ALLOWED_GROWTH


def create_request(name: str, partitions: int) -> messages.CreateTopicsRequest:
    topic = messages.CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)
    return messages.CreateTopicsRequest(topics=[topic], timeout_ms=120_000)


def create_partitions_topic(proc: BrokerProcess, name: str, partitions: int) -> tuple[int, str | None]:
    with WireClient(proc.bootstrap, timeout=60) as wire:
        result = wire.request(create_request(name, partitions), 7).topics[0]
    return result.error_code, result.error_message


def leftovers(proc: BrokerProcess, name: str) -> list[str]:
    found = [p.name for p in proc.data_dir.iterdir() if p.name.startswith(f"{name}-")]
    return found + [p.name for p in (proc.data_dir / ".topics").iterdir() if p.name.startswith(name)]


def test_creations_beyond_the_descriptor_limit_succeed_or_leave_nothing(
    broker_factory: BrokerFactory,
) -> None:
    proc = broker_factory(BROKER_CONFIG)
    assert proc.pid is not None
    soft, hard = resource.prlimit(proc.pid, resource.RLIMIT_NOFILE)
    try:
        # Room for the capped segments and a few connections, far less than 4 per partition.
        room = open_descriptors(proc) + ALLOWED_GROWTH + 16
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (room, hard))
        name = f"many-{uuid.uuid4().hex[:8]}"
        assert create_partitions_topic(proc, name, 400) == (0, None)
        assert len([p for p in proc.data_dir.iterdir() if p.name.startswith(f"{name}-")]) == 400

        # No descriptor to spare (the connection is already open): the creation fails and is
        # undone completely.
        doomed = f"doomed-{uuid.uuid4().hex[:8]}"
        with WireClient(proc.bootstrap, timeout=60) as wire:
            wire.request(messages.ApiVersionsRequest(), 0)
            resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (open_descriptors(proc), hard))
            result = wire.request(create_request(doomed, 50), 7).topics[0]
        assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR, result.error_message
        assert result.error_message is not None and str(proc.data_dir) not in result.error_message
    finally:
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (soft, hard))
    assert leftovers(proc, doomed) == []
    with WireClient(proc.bootstrap) as wire:  # new connections are answered
        metadata = wire.request(messages.MetadataRequest(topics=None), 12)
    assert {t.name for t in metadata.topics} >= {name}
    assert doomed not in {t.name for t in metadata.topics}


def test_a_large_creation_leaves_the_broker_answering_others(broker_factory: BrokerFactory) -> None:
    """Partitions are opened a step at a time with the event loop yielded between steps: another
    client is answered while a CreateTopics of 500 partitions is still under way."""
    proc = broker_factory(BROKER_CONFIG)
    name = f"wide-{uuid.uuid4().hex[:8]}"
    with WireClient(proc.bootstrap, timeout=120) as creator, WireClient(proc.bootstrap) as other:
        creator.send(create_request(name, 500), 7)
        deadline = time.monotonic() + 60
        while not any(p.name.startswith(f"{name}-") for p in proc.data_dir.iterdir()):
            assert time.monotonic() < deadline, "the creation never started"
        assert other.request(messages.ApiVersionsRequest(), 0).error_code == 0
        assert other.request(messages.MetadataRequest(topics=None), 12).topics is not None
        creation_answered = select.select([creator.sock], [], [], 0)[0]
        assert not creation_answered, "the other client was only answered after the creation"
        _, created = creator.receive(messages.CreateTopicsRequest.API_KEY, 7)
    assert created.topics[0].error_code == 0
    with WireClient(proc.bootstrap) as wire:
        metadata = wire.request(messages.MetadataRequest(topics=None), 12)
    assert len(next(t for t in metadata.topics if t.name == name).partitions) == 500
