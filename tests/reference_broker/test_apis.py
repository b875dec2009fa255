"""Each API over raw requests, where exact error codes and fields matter more than client behaviour."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from reference_broker.testing import BrokerProcess
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from sdk.records import RecordBatchBuilder, iter_batches
from tests.reference_broker.wire import WireClient, fetch_request


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def batch(*values: bytes, timestamp: int = 1_700_000_000_000, **kwargs: object) -> bytes:
    builder = RecordBatchBuilder(**kwargs)  # type: ignore[arg-type]
    for i, value in enumerate(values):
        builder.append(timestamp + i, None, value)
    return builder.build()


def create(
    client: WireClient,
    name: str,
    partitions: int = 1,
    configs: dict[str, str] | None = None,
    validate_only: bool = False,
    replication_factor: int = 1,
) -> object:
    request = CreateTopicsRequest(
        timeout_ms=10_000,
        validate_only=validate_only,
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                    for k, v in (configs or {}).items()
                ],
            )
        ],
    )
    return client.request(request, 7).topics[0]


def produce(
    client: WireClient,
    topic: str,
    records: bytes,
    partition: int = 0,
    version: int = 9,
    acks: int = -1,
    topic_id: uuid.UUID | None = None,
) -> object:
    request = ProduceRequest(
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                topic_id=topic_id or uuid.UUID(int=0),
                partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)],
            )
        ],
    )
    return client.request(request, version).responses[0].partition_responses[0]


def fetch(
    client: WireClient,
    topic: str,
    offset: int = 0,
    version: int = 12,
    *,
    max_bytes: int = 50 << 20,
    partition_max_bytes: int = 1 << 20,
    **options: Any,
) -> object:
    """Partition 0 of ``topic`` from ``offset``; ``options`` as ``fetch_request`` takes them."""
    request = fetch_request(
        topic, 0, offset, max_bytes=max_bytes, partition_max_bytes=partition_max_bytes, **options
    )
    return client.request(request, version).responses[0].partitions[0]


def list_offset(client: WireClient, topic: str, timestamp: int, version: int = 8) -> object:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)],
            )
        ],
    )
    return client.request(request, version).topics[0].partitions[0]


@pytest.fixture
def client(broker: BrokerProcess):  # type: ignore[no-untyped-def]
    with WireClient(broker.bootstrap) as wire:
        yield wire


def test_produce_then_fetch_returns_the_same_bytes(client: WireClient) -> None:
    topic = unique("api")
    assert create(client, topic).error_code == 0
    first = produce(client, topic, batch(b"a", b"b", b"c"))
    assert (first.error_code, first.base_offset, first.log_start_offset) == (0, 0, 0)
    second = produce(client, topic, batch(b"d"))
    assert second.base_offset == 3
    data = fetch(client, topic)
    assert data.error_code == 0
    assert (data.high_watermark, data.last_stable_offset, data.log_start_offset) == (4, 4, 0)
    batches = list(iter_batches(bytes(data.records)))
    assert [b.base_offset for b in batches] == [0, 3]
    assert [r.value for b in batches for r in b] == [b"a", b"b", b"c", b"d"]


def test_corrupt_crc_is_refused_and_log_unchanged(client: WireClient) -> None:
    topic = unique("api-crc")
    create(client, topic)
    produce(client, topic, batch(b"good"))
    bad = bytearray(batch(b"evil"))
    bad[-1] ^= 0xFF
    result = produce(client, topic, bytes(bad))
    assert result.error_code == ErrorCode.CORRUPT_MESSAGE
    assert fetch(client, topic).high_watermark == 1
    assert produce(client, topic, batch(b"after")).base_offset == 1


def test_oversized_batch_is_refused_and_log_unchanged(client: WireClient) -> None:
    topic = unique("api-big")
    create(client, topic, configs={"max.message.bytes": "2000"})
    result = produce(client, topic, batch(b"x" * 5000))
    assert result.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert fetch(client, topic).high_watermark == 0
    assert produce(client, topic, batch(b"x" * 100)).error_code == 0


def test_request_level_record_rules(client: WireClient) -> None:
    topic = unique("api-rules")
    create(client, topic)
    two = batch(b"1") + batch(b"2")
    assert produce(client, topic, two).error_code == ErrorCode.INVALID_RECORD
    legacy = bytearray(batch(b"1"))
    legacy[16] = 1
    assert produce(client, topic, bytes(legacy)).error_code == ErrorCode.INVALID_RECORD
    assert produce(client, topic, b"").error_code == ErrorCode.INVALID_RECORD
    zstd = batch(b"z", compression=4)
    assert produce(client, topic, zstd, version=6).error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert produce(client, topic, zstd, version=7).error_code == 0
    assert produce(client, topic, batch(b"1"), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_keyless_records_on_a_compacted_topic_are_each_named(client: WireClient) -> None:
    """KIP-467: every record refused is listed with its index and reason, nothing is appended,
    and the same batch with keys everywhere is then accepted."""
    topic = unique("api-compact")
    create(client, topic, configs={"cleanup.policy": "compact"})
    keys = [b"k0", None, b"k2", None, b"k4"]
    builder = RecordBatchBuilder()
    for i, key in enumerate(keys):
        builder.append(1_700_000_000_000 + i, key, b"v%d" % i)
    result = produce(client, topic, builder.build())
    assert result.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in result.record_errors] == [1, 3]
    assert all("without key" in e.batch_index_error_message for e in result.record_errors)
    assert "2 record errors" in result.error_message
    assert fetch(client, topic).high_watermark == 0
    keyed = RecordBatchBuilder()
    for i in range(5):
        keyed.append(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i)
    assert produce(client, topic, keyed.build()).error_code == 0
    assert fetch(client, topic).high_watermark == 5


def test_errors_about_a_whole_batch_name_no_record(client: WireClient) -> None:
    """record_errors is for records at fault; a batch refused as a whole (two batches in one
    partition's data) lists none, as Kafka answers."""
    topic = unique("api-batch-error")
    create(client, topic)
    result = produce(client, topic, batch(b"1") + batch(b"2"))
    assert result.error_code == ErrorCode.INVALID_RECORD
    assert result.error_message and result.record_errors == []


def test_produce_to_unknown_topic_and_partition(client: WireClient) -> None:
    missing = unique("api-none")
    assert produce(client, missing, batch(b"x")).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    topic = unique("api-part")
    create(client, topic)
    assert produce(client, topic, batch(b"x"), partition=5).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_topic_ids_in_metadata_produce_and_fetch(client: WireClient) -> None:
    topic = unique("api-ids")
    created = create(client, topic)
    meta = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
    assert meta.topics[0].topic_id == created.topic_id != uuid.UUID(int=0)
    assert meta.controller_id == 1 and meta.cluster_id
    by_id = client.request(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=created.topic_id)]),
        12,
    )
    assert by_id.topics[0].name == topic
    result = produce(client, "", batch(b"by-id"), version=13, topic_id=created.topic_id)
    assert (result.error_code, result.base_offset) == (0, 0)
    data = fetch(client, "", version=18, topic_id=created.topic_id)
    assert [r.value for b in iter_batches(bytes(data.records)) for r in b] == [b"by-id"]
    unknown = fetch(client, "", version=13, topic_id=uuid.uuid4())
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_metadata_auto_create_and_invalid_names(client: WireClient) -> None:
    topic = unique("api-auto")
    response = client.request(
        MetadataRequest(
            topics=[
                MetadataRequest.MetadataRequestTopic(name=topic),
                MetadataRequest.MetadataRequestTopic(name="bad/name"),
            ]
        ),
        12,
    )
    assert [t.error_code for t in response.topics] == [0, ErrorCode.INVALID_TOPIC_EXCEPTION]
    assert response.topics[0].partitions[0].leader_id == 1
    no_create = unique("api-nocreate")
    response = client.request(
        MetadataRequest(
            allow_auto_topic_creation=False, topics=[MetadataRequest.MetadataRequestTopic(name=no_create)]
        ),
        12,
    )
    assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_limits_return_at_least_one_batch(client: WireClient) -> None:
    topic = unique("api-limits")
    create(client, topic)
    produce(client, topic, batch(b"x" * 3000))
    produce(client, topic, batch(b"y" * 3000))
    small = fetch(client, topic, partition_max_bytes=100)
    assert [b.base_offset for b in iter_batches(bytes(small.records))] == [0]
    tiny_response = fetch(client, topic, max_bytes=10)
    assert [b.base_offset for b in iter_batches(bytes(tiny_response.records))] == [0]
    both = fetch(client, topic)
    assert [b.base_offset for b in iter_batches(bytes(both.records))] == [0, 1]


def test_fetch_out_of_range(client: WireClient) -> None:
    topic = unique("api-oor")
    create(client, topic)
    produce(client, topic, batch(b"1"))
    assert fetch(client, topic, offset=1).error_code == 0
    result = fetch(client, topic, offset=5)
    assert result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert result.high_watermark == 1


def test_fetch_long_poll_wakes_on_produce(broker: BrokerProcess, client: WireClient) -> None:
    topic = unique("api-poll")
    create(client, topic)

    def produce_later() -> None:
        time.sleep(0.3)  # most likely after the fetch is parked; if not, the test proves less
        with WireClient(broker.bootstrap) as other:
            produce(other, topic, batch(b"late"))

    thread = threading.Thread(target=produce_later)
    # A fetch the produce does not wake waits its whole max_wait of 120 s; 60 s leaves a loaded
    # runner (Kafka JVMs and Spark beside the suite) far more than it needs while staying far
    # from that. The socket timeout is the bound: only the produce can end this wait in time.
    with WireClient(broker.bootstrap, timeout=60) as poller:
        started = time.monotonic()
        thread.start()
        data = fetch(poller, topic, max_wait_ms=120_000, min_bytes=1)
        elapsed = time.monotonic() - started
    thread.join()
    assert [r.value for b in iter_batches(bytes(data.records)) for r in b] == [b"late"]
    assert elapsed < 60


def test_fetch_long_poll_times_out_empty(client: WireClient) -> None:
    topic = unique("api-timeout")
    create(client, topic)
    started = time.monotonic()
    data = fetch(client, topic, max_wait_ms=300, min_bytes=1)
    # At least max_wait (measured by the broker, inside this span); at most the socket timeout.
    assert 0.25 < time.monotonic() - started < 10
    assert data.error_code == 0 and len(data.records) == 0


@pytest.mark.parametrize(
    ("version", "missing"), [(12, "UNKNOWN_TOPIC_OR_PARTITION"), (13, "UNKNOWN_TOPIC_ID")]
)
def test_fetch_long_poll_answers_a_topic_deleted_meanwhile(
    broker: BrokerProcess, client: WireClient, version: int, missing: str
) -> None:
    """A long poll over two topics, one deleted while it waits: that partition answers as unknown
    (by name before v13, by id from v13) and the other's data is still served, without waiting
    out max_wait. Before the fix the whole response was a top-level UNKNOWN_SERVER_ERROR."""
    kept, gone = unique("api-kept"), unique("api-gone")
    ids = {name: create(client, name).topic_id for name in (kept, gone)}
    assert produce(client, kept, batch(b"still here")).error_code == 0
    by_id = version >= 13
    request = FetchRequest(
        max_wait_ms=120_000,  # beyond the 60 s bound below: only the deletion ends it in time
        min_bytes=1 << 20,  # more than there is: the fetch waits
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic="" if by_id else name,
                topic_id=ids[name] if by_id else uuid.UUID(int=0),
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
                ],
            )
            for name in (kept, gone)
        ],
    )
    started = time.monotonic()
    client.send(request, version)
    time.sleep(0.3)
    with WireClient(broker.bootstrap) as other:
        deleted = other.request(DeleteTopicsRequest(timeout_ms=5000, topic_names=[gone]), 5).responses[0]
        assert deleted.error_code == 0
    # Far from the 120 s max_wait a missed wake-up waits, and roomy for a loaded runner.
    client.sock.settimeout(60)
    _, response = client.receive(FetchRequest.API_KEY, version)
    assert time.monotonic() - started < 60  # the deletion ended the wait
    assert response.error_code == 0
    by_topic = {(t.topic_id if by_id else t.topic): t.partitions for t in response.responses}
    served = by_topic[ids[kept] if by_id else kept][0]
    assert served.error_code == 0 and served.high_watermark == 1
    assert [r.value for b in iter_batches(bytes(served.records)) for r in b] == [b"still here"]
    refused = by_topic[ids[gone] if by_id else gone][0]
    assert refused.error_code == ErrorCode[missing] and len(refused.records or b"") == 0
    # The broker is still serving the kept topic on the same connection.
    assert fetch(client, kept, version=version, topic_id=ids[kept] if by_id else None).error_code == 0


def test_long_poll_does_not_block_other_connections(broker: BrokerProcess, client: WireClient) -> None:
    topic = unique("api-block")
    create(client, topic)
    # The long poll outlasts any socket timeout: a broker that let it block other connections
    # would leave the Metadata below unanswered (TimeoutError after 10 s).
    client.send(fetch_request(topic, max_wait_ms=120_000, min_bytes=1), 12)
    with WireClient(broker.bootstrap) as other:
        assert other.request(MetadataRequest(topics=None), 12).brokers
        assert produce(other, topic, batch(b"wake")).error_code == 0  # ends the long poll
    _, answer = client.receive(1, 12)
    assert [r.value for b in iter_batches(bytes(answer.responses[0].partitions[0].records)) for r in b] == [
        b"wake"
    ]


def test_fetch_session_errors(client: WireClient) -> None:
    response = client.request(FetchRequest(session_id=1234, session_epoch=1, topics=[]), 12)
    assert response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    closing = client.request(FetchRequest(session_id=55, session_epoch=-1, topics=[]), 12)
    assert (closing.error_code, closing.session_id) == (0, 0)
    opened = client.request(FetchRequest(session_id=0, session_epoch=0, topics=[]), 12)
    assert opened.error_code == 0 and opened.session_id != 0
    wrong_epoch = client.request(FetchRequest(session_id=opened.session_id, session_epoch=5, topics=[]), 12)
    assert wrong_epoch.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    by_ids = client.request(FetchRequest(session_id=opened.session_id, session_epoch=1, topics=[]), 13)
    assert by_ids.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_incremental_fetch_session(client: WireClient) -> None:
    topic = unique("api-session")
    create(client, topic, partitions=2)
    produce(client, topic, batch(b"p0"), partition=0)
    produce(client, topic, batch(b"p1"), partition=1)

    def session_fetch(session_id: int, epoch: int, offsets: dict[int, int], forget: list[int] = ()) -> object:
        return client.request(
            FetchRequest(
                max_wait_ms=0,
                max_bytes=1 << 20,
                session_id=session_id,
                session_epoch=epoch,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            FetchRequest.FetchPartition(
                                partition=p, fetch_offset=o, partition_max_bytes=1 << 20
                            )
                            for p, o in offsets.items()
                        ],
                    )
                ]
                if offsets
                else [],
                forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=topic, partitions=list(forget))]
                if forget
                else [],
            ),
            12,
        )

    def reported(response: object) -> dict[int, int]:
        return {p.partition_index: len(p.records) for t in response.responses for p in t.partitions}

    full = session_fetch(0, 0, {0: 0, 1: 0})
    session = full.session_id
    assert session != 0 and set(reported(full)) == {0, 1}
    # The client moves both positions to the end: nothing changed, so nothing is reported.
    assert reported(session_fetch(session, 1, {0: 1, 1: 1})) == {}
    # New data in partition 1 only; the request names no partitions (positions unchanged).
    produce(client, topic, batch(b"p1-again"), partition=1)
    update = session_fetch(session, 2, {})
    assert reported(update) == {1: len(batch(b"p1-again"))}
    assert update.responses[0].partitions[0].high_watermark == 2
    # Forgetting partition 1 removes it from the session.
    produce(client, topic, batch(b"more"), partition=1)
    assert reported(session_fetch(session, 3, {}, forget=[1])) == {}
    produce(client, topic, batch(b"p0-new"), partition=0)
    assert set(reported(session_fetch(session, 4, {}))) == {0}


def test_read_committed_fetch_and_list_offsets(client: WireClient) -> None:
    topic = unique("api-committed")
    create(client, topic)
    produce(client, topic, batch(b"a", b"b"))
    data = fetch(client, topic, isolation_level=1)
    assert (data.last_stable_offset, data.aborted_transactions) == (2, [])
    assert len(list(iter_batches(bytes(data.records)))) == 1
    assert fetch(client, topic).aborted_transactions is None
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
            )
        ],
    )
    assert client.request(request, 8).topics[0].partitions[0].offset == 2


def test_list_offsets(client: WireClient) -> None:
    topic = unique("api-offsets")
    create(client, topic)
    produce(client, topic, batch(b"a", b"b", timestamp=1000))
    produce(client, topic, batch(b"c", timestamp=5000))
    produce(client, topic, batch(b"d", timestamp=3000))
    assert list_offset(client, topic, -2).offset == 0
    assert list_offset(client, topic, -1).offset == 4
    found = list_offset(client, topic, 1001)
    assert (found.offset, found.timestamp) == (1, 1001)
    found = list_offset(client, topic, 2000)
    assert (found.offset, found.timestamp) == (2, 5000)
    assert list_offset(client, topic, 9999).offset == -1
    newest = list_offset(client, topic, -3, version=7)
    assert (newest.offset, newest.timestamp) == (2, 5000)
    assert list_offset(client, topic, -3, version=6).error_code == ErrorCode.UNSUPPORTED_VERSION


def test_delete_records(client: WireClient) -> None:
    topic = unique("api-delrec")
    create(client, topic)
    for i in range(5):
        produce(client, topic, batch(b"%d" % i))

    def delete(offset: int) -> object:
        return (
            client.request(
                DeleteRecordsRequest(
                    timeout_ms=5000,
                    topics=[
                        DeleteRecordsRequest.DeleteRecordsTopic(
                            name=topic,
                            partitions=[
                                DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=offset)
                            ],
                        )
                    ],
                ),
                2,
            )
            .topics[0]
            .partitions[0]
        )

    assert (delete(3).error_code, delete(3).low_watermark) == (0, 3)
    assert delete(99).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert list_offset(client, topic, -2).offset == 3
    assert fetch(client, topic, offset=1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert delete(-1).low_watermark == 5


def test_create_topics_validation(client: WireClient) -> None:
    topic = unique("api-create")
    assert create(client, topic, validate_only=True).error_code == 0
    meta = client.request(
        MetadataRequest(
            allow_auto_topic_creation=False, topics=[MetadataRequest.MetadataRequestTopic(name=topic)]
        ),
        12,
    )
    assert meta.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert create(client, topic, replication_factor=3).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert create(client, topic, partitions=0).error_code == ErrorCode.INVALID_PARTITIONS
    assert create(client, topic, configs={"retention.ms": "soon"}).error_code == ErrorCode.INVALID_CONFIG
    assert create(client, topic, configs={"no.such.key": "1"}).error_code == ErrorCode.INVALID_CONFIG
    assert create(client, "a" * 300).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    result = create(client, topic, partitions=-1, replication_factor=-1, configs={"segment.bytes": "1048576"})
    assert (result.error_code, result.num_partitions, result.replication_factor) == (0, 1, 1)
    configs = {c.name: (c.value, c.config_source) for c in result.configs}
    assert configs["segment.bytes"] == ("1048576", 1)
    assert create(client, topic).error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_create_partitions_and_delete_by_id(client: WireClient) -> None:
    topic = unique("api-parts")
    created = create(client, topic, partitions=2)

    def grow(count: int) -> int:
        return (
            client.request(
                CreatePartitionsRequest(
                    timeout_ms=5000,
                    topics=[
                        CreatePartitionsRequest.CreatePartitionsTopic(
                            name=topic, count=count, assignments=None
                        )
                    ],
                ),
                3,
            )
            .results[0]
            .error_code
        )

    assert grow(1) == ErrorCode.INVALID_PARTITIONS
    assert grow(2) == ErrorCode.INVALID_PARTITIONS
    assert grow(5) == 0
    meta = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
    assert len(meta.topics[0].partitions) == 5
    deleted = client.request(
        DeleteTopicsRequest(
            timeout_ms=5000,
            topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=created.topic_id)],
        ),
        6,
    ).responses[0]
    assert (deleted.error_code, deleted.name) == (0, topic)
    again = client.request(DeleteTopicsRequest(timeout_ms=5000, topic_names=[topic]), 5).responses[0]
    assert again.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_internal_topics_cannot_be_deleted(client: WireClient) -> None:
    """Deleting __consumer_offsets or __transaction_state would drop every group's offsets and
    open transaction while the coordinators keep serving from memory: refused, topic kept."""
    client.request(FindCoordinatorRequest(key="internal-delete", key_type=0), 3)
    client.request(InitProducerIdRequest(transactional_id="internal-delete", transaction_timeout_ms=10000), 4)
    names = ["__consumer_offsets", "__transaction_state"]
    refused = client.request(DeleteTopicsRequest(timeout_ms=5000, topic_names=names), 5).responses
    assert sorted((r.name, r.error_code) for r in refused) == [
        (name, ErrorCode.INVALID_TOPIC_EXCEPTION) for name in names
    ]
    assert all("internal topic" in r.error_message for r in refused)
    wanted = [MetadataRequest.MetadataRequestTopic(name=name) for name in names]
    meta = client.request(MetadataRequest(topics=wanted), 12)
    assert [(t.name, t.error_code, t.is_internal) for t in meta.topics] == [(n, 0, True) for n in names]


def test_describe_and_incremental_alter_configs(client: WireClient) -> None:
    topic = unique("api-configs")
    create(client, topic, configs={"retention.ms": "60000"})

    def describe(keys: list[str] | None) -> dict:
        response = client.request(
            DescribeConfigsRequest(
                include_synonyms=True,
                include_documentation=True,
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2, resource_name=topic, configuration_keys=keys
                    )
                ],
            ),
            4,
        )
        return {c.name: c for c in response.results[0].configs}

    configs = describe(None)
    assert configs["retention.ms"].value == "60000" and configs["retention.ms"].config_source == 1
    # Kafka's synonyms stop at the broker key itself: log.retention.ms has no value of its own.
    assert [s.name for s in configs["retention.ms"].synonyms] == ["retention.ms"]
    assert configs["cleanup.policy"].config_type == 7  # LIST
    assert set(describe(["segment.bytes"])) == {"segment.bytes"}

    op = IncrementalAlterConfigsRequest.AlterableConfig
    response = client.request(
        IncrementalAlterConfigsRequest(
            resources=[
                IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=2,
                    resource_name=topic,
                    configs=[
                        op(name="retention.ms", config_operation=1, value=None),
                        op(name="cleanup.policy", config_operation=2, value="compact"),
                    ],
                )
            ]
        ),
        1,
    )
    assert response.responses[0].error_code == 0
    configs = describe(None)
    assert configs["retention.ms"].config_source == 5
    assert configs["cleanup.policy"].value == "delete,compact"
    bad = client.request(
        IncrementalAlterConfigsRequest(
            resources=[
                IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=2,
                    resource_name=topic,
                    configs=[op(name="retention.ms", config_operation=2, value="5")],
                )
            ]
        ),
        1,
    )
    assert bad.responses[0].error_code == ErrorCode.INVALID_CONFIG


def test_broker_configs(client: WireClient) -> None:
    response = client.request(
        DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=4, resource_name="1", configuration_keys=None
                ),
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=4, resource_name="7", configuration_keys=None
                ),
            ]
        ),
        4,
    )
    ours, other = response.results
    configs = {c.name: c for c in ours.configs}
    assert configs["num.partitions"].value == "1" and configs["num.partitions"].config_source == 4
    assert configs["message.max.bytes"].value == "1048588" and configs["message.max.bytes"].config_source == 5
    assert other.error_code == ErrorCode.INVALID_REQUEST


def test_describe_cluster_and_init_producer_id(broker: BrokerProcess, client: WireClient) -> None:
    cluster = client.request(DescribeClusterRequest(), 1)
    assert cluster.controller_id == 1
    assert [(b.broker_id, b.host, b.port) for b in cluster.brokers] == [(1, broker.host, broker.port)]
    first = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
    second = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
    assert first.error_code == second.error_code == 0
    assert second.producer_id > first.producer_id >= 0
    assert first.producer_epoch == 0
    txn = client.request(InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=60000), 4)
    assert txn.error_code == 0 and txn.producer_id > second.producer_id


def test_pipelined_large_fetches_arrive_whole_and_in_order(broker: BrokerProcess) -> None:
    """Multi-MiB Fetch responses are handed to the transport in pieces as the socket drains
    (``Connection._write``) and their records come from file mappings: pipelined behind and
    ahead of small requests, read by a slow client, every byte still arrives in order."""
    topic = unique("large-fetch")
    values = [bytes([i % 251]) * 200_000 for i in range(40)]  # 8 MB in 10 batches of 800 kB
    with WireClient(broker.bootstrap, timeout=30) as client:
        assert create(client, topic).error_code == 0
        for start in range(0, len(values), 4):
            assert produce(client, topic, batch(*values[start : start + 4])).error_code == 0
        request = fetch_request(topic, max_bytes=50 << 20, partition_max_bytes=10 << 20)
        metadata = MetadataRequest(topics=[])
        sent = [client.send(request, 12), client.send(metadata, 12), client.send(request, 12)]
        time.sleep(0.5)  # let the broker fill the socket and wait for it to drain
        for api_key, expected_cid in zip((1, 3, 1), sent, strict=True):
            cid, response = client.receive(api_key, 12)
            assert cid == expected_cid
            if api_key == 1:
                records = response.responses[0].partitions[0].records
                got = [r.value for b in iter_batches(bytes(records)) for r in b]
                assert got == values
