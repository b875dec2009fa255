"""A coordinator record too large for its topic is UNKNOWN_SERVER_ERROR, as Kafka answers it.

Kafka's coordinators map a write failure to the client's error with one table
(CoordinatorOperationExceptionHelper / TransactionStateManager): MESSAGE_TOO_LARGE and
RECORD_LIST_TOO_LARGE become UNKNOWN_SERVER_ERROR, not the retriable COORDINATOR_NOT_AVAILABLE a
client would retry forever. One OffsetCommit of 300 partitions with 4,000-byte metadata is one
batch of about 1.2 MB for ``__consumer_offsets``, beyond its 1 MiB ``max.message.bytes``. A small
commit from a well-behaved group beside it still succeeds.
"""

from __future__ import annotations

import time
import uuid

import pytest

from sdk.protocol import messages
from sdk.protocol.errors import ErrorCode
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.interop

PARTITIONS = 300


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest) -> str:
    fixture = "apache_kafka" if request.param == "apache" else "broker"
    return str(request.getfixturevalue(fixture).bootstrap)


def commit(wire: WireClient, group: str, topic: str, partitions: int, metadata: str) -> set[int]:
    request = messages.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[messages.OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            messages.OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=0, committed_metadata=metadata)
            for p in range(partitions)])])
    response = wire.request(request, 8)
    return {p.error_code for t in response.topics for p in t.partitions}


def find_coordinator(wire: WireClient, group: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = wire.request(messages.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        if answer.coordinators[0].error_code == 0:
            return
        time.sleep(0.1)
    raise AssertionError("no coordinator")


def test_too_large_offset_commit_is_unknown_server_error(bootstrap: str) -> None:
    topic = f"big-commit-{uuid.uuid4().hex[:8]}"
    with WireClient(bootstrap, timeout=60) as wire:
        new_topic = messages.CreateTopicsRequest.CreatableTopic(
            name=topic, num_partitions=PARTITIONS, replication_factor=1)
        create = messages.CreateTopicsRequest(topics=[new_topic], timeout_ms=30_000)
        created = wire.request(create, 7).topics[0]
        assert created.error_code == 0, created.error_message
        abusive, polite = f"abusive-{uuid.uuid4().hex[:6]}", f"polite-{uuid.uuid4().hex[:6]}"
        find_coordinator(wire, abusive)
        find_coordinator(wire, polite)
        deadline = time.monotonic() + 60  # the new topic may take a moment to reach the coordinator
        while (codes := commit(wire, polite, topic, 1, "")) != {ErrorCode.NONE}:
            assert time.monotonic() < deadline, codes
            time.sleep(0.1)
        assert codes == {ErrorCode.NONE}
        assert commit(wire, abusive, topic, PARTITIONS, "m" * 4000) == {ErrorCode.UNKNOWN_SERVER_ERROR}
        assert commit(wire, polite, topic, 1, "still here") == {ErrorCode.NONE}
