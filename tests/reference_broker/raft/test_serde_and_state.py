"""Metadata record framing (Kafka's MetadataRecordSerde), KRaft control batches and the
quorum-state file."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from reference_broker.internal_records import PartitionRecord, TopicRecord
from reference_broker.raft.quorum_state import (
    ElectionState,
    QuorumStateError,
    read_quorum_state,
    write_quorum_state,
)
from reference_broker.raft.serde import (
    MetadataRecordError,
    batch_records,
    build_control_record_batch,
    build_data_batch,
    decode_metadata_record,
    encode_metadata_record,
)
from sdk.protocol.codec import encode
from sdk.protocol.messages import LeaderChangeMessage
from sdk.records.batch import iter_batches

pytestmark = pytest.mark.unit


def test_frame_is_version_type_record_version_then_the_record() -> None:
    record = PartitionRecord(partition_id=3, topic_id=uuid.uuid4(), replicas=[1, 2], isr=[1])
    version = PartitionRecord.VALID_VERSIONS[1]
    value = encode_metadata_record(record)
    assert value[:3] == bytes([1, PartitionRecord.API_KEY, version])
    assert value[3:] == encode(record, version)
    assert decode_metadata_record(value) == record


@pytest.mark.parametrize("value, message", [
    (b"\x02\x02\x00", "frame version 2"),
    (b"\x01\x7f\x00", "unknown metadata record type 127"),
    (b"\x01\x02\x09", "version 9"),
    (b"\x01\x82", "inside a varint"),
])
def test_bad_frames_are_refused_by_name(value: bytes, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        decode_metadata_record(value)


def test_data_batch_has_null_keys_and_the_raft_epoch() -> None:
    records = [TopicRecord(name="a", topic_id=uuid.uuid4()), TopicRecord(name="b", topic_id=uuid.uuid4())]
    batch = next(iter_batches(build_data_batch(records, base_offset=7, epoch=4, timestamp_ms=1)))
    assert (batch.base_offset, batch.partition_leader_epoch, batch.is_control) == (7, 4, False)
    assert [r.key for r in batch.iter_records()] == [None, None]
    assert batch_records(batch) == records


def test_leader_change_is_a_control_batch_without_producer() -> None:
    message = LeaderChangeMessage(leader_id=2, voters=[LeaderChangeMessage.Voter(voter_id=2)],
                                  granting_voters=[])
    batch = next(iter_batches(build_control_record_batch(message, base_offset=0, epoch=3,
                                                         timestamp_ms=0)))
    assert batch.is_control and batch.producer_id == -1
    assert batch.control_record().type == 2
    assert batch_records(batch) == [message]


def test_quorum_state_round_trip_in_kafkas_json(tmp_path: Path) -> None:
    assert read_quorum_state(tmp_path) is None
    write_quorum_state(tmp_path, ElectionState(5, 2, None))
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert data["leaderId"] == 2 and data["leaderEpoch"] == 5 and data["votedId"] == -1
    assert data["data_version"] == 1
    assert read_quorum_state(tmp_path) == ElectionState(5, 2, None)


def test_quorum_state_keeps_the_voted_replicas_directory_id(tmp_path: Path) -> None:
    directory = uuid.UUID(int=77)
    write_quorum_state(tmp_path, ElectionState(4, None, 3, directory))
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert (data["votedId"], data["votedDirectoryId"]) == (3, "AAAAAAAAAAAAAAAAAAAATQ")
    assert read_quorum_state(tmp_path) == ElectionState(4, None, 3, directory)
    data["votedDirectoryId"] = "not a uuid"
    (tmp_path / "quorum-state").write_text(json.dumps(data))
    with pytest.raises(QuorumStateError, match="votedDirectoryId"):
        read_quorum_state(tmp_path)


def test_quorum_state_version_0_is_read(tmp_path: Path) -> None:
    (tmp_path / "quorum-state").write_text(json.dumps({
        "clusterId": "", "leaderId": -1, "leaderEpoch": 3, "votedId": 1, "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}], "data_version": 0}))
    assert read_quorum_state(tmp_path) == ElectionState(3, None, 1)


@pytest.mark.parametrize("text", ["{", "[]", '{"data_version": 7, "leaderEpoch": 1}',
                                  '{"data_version": 1, "leaderEpoch": -1}'])
def test_bad_quorum_state_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / "quorum-state").write_text(text)
    with pytest.raises(QuorumStateError):
        read_quorum_state(tmp_path)
