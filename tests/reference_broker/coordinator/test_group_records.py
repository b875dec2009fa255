"""``__consumer_offsets`` records: the bytes of each record kind are the ones the broker has always
written (captured from the hand-declared tables the generated classes replaced; the offset value
is Kafka 4.1's flexible v4 since), and read back."""

from __future__ import annotations

import pytest

from reference_broker.coordinator.group import records
from reference_broker.coordinator.group.records import GroupKey, GroupMetadataValue, OffsetKey

Member = GroupMetadataValue.MemberMetadata

STATIC_MEMBER = Member(
    member_id="m-1",
    group_instance_id="static-1",
    client_id="c",
    client_host="/127.0.0.1",
    rebalance_timeout=30_000,
    session_timeout=10_000,
    subscription=b"\x00\x01",
    assignment=b"\x02",
)
DYNAMIC_MEMBER = Member(
    member_id="m-2",
    group_instance_id=None,
    client_id="d",
    client_host="/10.0.0.2",
    rebalance_timeout=-1,
    session_timeout=45_000,
    subscription=b"",
    assignment=b"",
)
STABLE_GROUP = GroupMetadataValue(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="m-1",
    current_state_timestamp=1_234,
    members=[STATIC_MEMBER, DYNAMIC_MEMBER],
)
EMPTY_GROUP = GroupMetadataValue(
    protocol_type="", generation=0, protocol=None, leader=None, current_state_timestamp=-1, members=[]
)

GOLDEN = {
    "offset_key": (
        records.offset_key("group-1", "orders", 3),
        "0001000767726f75702d3100066f726465727300000003",
    ),
    "group_key": (records.group_key("group-1"), "0002000767726f75702d31"),
    "offset_value": (
        records.offset_value(42, 5, "meta", 1_000, None),
        "0004000000000000002a00000005056d65746100000000000003e800",
    ),
    "offset_value_with_expiry": (
        records.offset_value(42, -1, "", 1_000, 2_000),
        "0001000000000000002a000000000000000003e800000000000007d0",
    ),
    "group_value": (
        records.group_value(STABLE_GROUP),
        "00030008636f6e73756d657200000007000572616e676500036d2d3100000000000004d20000000200036d2d31"
        "00087374617469632d31000163000a2f3132372e302e302e310000753000002710000000020001000000010200"
        "036d2d32ffff00016400092f31302e302e302e32ffffffff0000afc80000000000000000",
    ),
    "empty_group_value": (
        records.group_value(EMPTY_GROUP),
        "0003000000000000ffffffffffffffffffffffff00000000",
    ),
}


@pytest.mark.parametrize("kind", GOLDEN)
def test_record_bytes_are_unchanged(kind: str) -> None:
    encoded, expected = GOLDEN[kind]
    assert encoded.hex() == expected


def test_keys_read_back() -> None:
    assert records.parse_key(bytes.fromhex(GOLDEN["offset_key"][1])) == OffsetKey("group-1", "orders", 3)
    assert records.parse_key(bytes.fromhex(GOLDEN["group_key"][1])) == GroupKey("group-1")
    # Version 3+ keys are the KIP-848 and share-group records this broker does not keep.
    assert records.parse_key(bytes.fromhex("0003000767726f75702d31")) is None


def test_offset_values_read_back() -> None:
    current = records.parse_offset_value(bytes.fromhex(GOLDEN["offset_value"][1]))
    assert (current.offset, current.leader_epoch, current.metadata, current.commit_timestamp) == (
        42,
        5,
        "meta",
        1_000,
    )
    # Version 1 carries the expiry a v2-v4 OffsetCommit asked for and has no leader epoch.
    with_expiry = records.parse_offset_value(bytes.fromhex(GOLDEN["offset_value_with_expiry"][1]))
    assert (with_expiry.leader_epoch, with_expiry.expire_timestamp) == (-1, 2_000)


def test_group_values_read_back() -> None:
    assert records.parse_group_value(bytes.fromhex(GOLDEN["group_value"][1])) == STABLE_GROUP
    assert records.parse_group_value(bytes.fromhex(GOLDEN["empty_group_value"][1])) == EMPTY_GROUP
