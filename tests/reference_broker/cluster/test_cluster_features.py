"""Finalized features changed with Kafka's own ``kafka-features`` (UpdateFeatures, forwarded by a
broker to the active controller), on our three-node cluster and on Apache Kafka's, with the same
expected output: what a new cluster finalizes, upgrades and downgrades of transaction.version,
group.version and metadata.version with Kafka's refusals word for word, and what a level changes
for clients (a transactional producer's protocol, the KIP-848 consumer group APIs). Then
kraft.version 0 to 1 on the static quorum: the voters get their directory ids, and the upgrade
cannot be undone.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import ApiVersionsRequest, ConsumerGroupHeartbeatRequest
from sdk.sync import Producer
from tests.oracles.kafka_tools import run_tool
from tests.reference_broker.cluster.three_nodes import ThreeNodes, create_topic, until
from tests.reference_broker.wire import WireClient

pytestmark = [pytest.mark.interop, pytest.mark.slow]

COMMON = ("group.version", "kraft.version", "metadata.version", "transaction.version")


def features_tool(nodes: ThreeNodes, *args: str) -> tuple[int, str]:
    """``kafka-features --bootstrap-server <cluster> args``: its exit code and output."""
    done = run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", nodes.bootstrap, *args)
    return done.returncode, (done.stdout + done.stderr).strip()


def ok(nodes: ThreeNodes, *args: str) -> str:
    code, out = features_tool(nodes, *args)
    assert code == 0, f"kafka-features {' '.join(args)}:\n{out}"
    return out


def refused(nodes: ThreeNodes, *args: str) -> str:
    code, out = features_tool(nodes, *args)
    assert code == 1, f"kafka-features {' '.join(args)} succeeded:\n{out}"
    # the active controller's id varies between runs: the rest of the message is Kafka's
    return re.sub(r"(?i)(local controller) \d+", r"\1 N", out)


def describe(nodes: ThreeNodes) -> tuple[dict[str, tuple[str, str, str]], int]:
    """(feature -> (supported min, supported max, finalized level)) of the features both clusters
    know, and the epoch they are reported at."""
    found: dict[str, tuple[str, str, str]] = {}
    epochs = set()
    for line in ok(nodes, "describe").splitlines():
        fields = dict(f.split(": ", 1) for f in line.split("\t") if ": " in f)
        if fields.get("Feature") in COMMON:
            found[fields["Feature"]] = (fields["SupportedMinVersion"], fields["SupportedMaxVersion"],
                                        fields["FinalizedVersionLevel"])
            epochs.add(int(fields["Epoch"]))
    assert len(epochs) == 1, epochs
    return found, epochs.pop()


def finalized(nodes: ThreeNodes, feature: str) -> str:
    return describe(nodes)[0][feature][2]


def transaction_protocol(nodes: ThreeNodes, topic: str) -> int | None:
    """The protocol a new transactional producer of our SDK picks (2: KIP-890) once it has
    committed a transaction."""
    producer = Producer(bootstrap_servers=nodes.bootstrap, transactional_id=f"tv-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"v").get(30)
        producer.commit_transaction()
        return producer.transaction_version
    finally:
        producer.close()


def heartbeat_refused(nodes: ThreeNodes) -> bool:
    """Whether the first node refuses a KIP-848 join with UNSUPPORTED_VERSION (a node that is
    not the group's coordinator otherwise answers NOT_COORDINATOR, the coordinator joins it)."""
    wire = WireClient(nodes.bootstrap.split(",")[0])
    try:
        answer: Any = wire.request(ConsumerGroupHeartbeatRequest(
            group_id=f"gv-{uuid.uuid4().hex[:8]}", member_id=uuid.uuid4().hex[:22], member_epoch=0,
            rebalance_timeout_ms=30_000, subscribed_topic_names=["t"], topic_partitions=[]), 1)
        return bool(answer.error_code == ErrorCode.UNSUPPORTED_VERSION)
    finally:
        wire.close()


def test_kafka_features_upgrades_and_downgrades_as_on_kafka(nodes: ThreeNodes) -> None:
    features, epoch = describe(nodes)
    assert features == {
        "group.version": ("0", "1", "1"),
        "kraft.version": ("0", "1", "0"),  # a static quorum (controller.quorum.voters)
        "metadata.version": ("3.3-IV3", "4.1-IV1", "4.1-IV1"),
        "transaction.version": ("0", "2", "2"),
    }, features
    topic = f"features-{uuid.uuid4().hex[:8]}"
    create_topic(nodes.bootstrap, topic, partitions=1)
    assert transaction_protocol(nodes, topic) == 2

    assert ok(nodes, "upgrade", "--feature", "transaction.version=2", "--dry-run") == \
        "transaction.version can be upgraded to 2."
    assert ok(nodes, "downgrade", "--feature", "transaction.version=1", "--dry-run") == \
        "transaction.version can be downgraded to 1."
    assert finalized(nodes, "transaction.version") == "2"  # a dry run changes nothing
    assert ok(nodes, "downgrade", "--feature", "transaction.version=1") == \
        "transaction.version was downgraded to 1."
    features, later = describe(nodes)
    assert features["transaction.version"][2] == "1" and later > epoch
    # every node's ApiVersions says so at once: a new producer falls back to transactions v1
    until(lambda: transaction_protocol(nodes, topic) == 1, "a new producer uses transactions v1", 30)

    assert refused(nodes, "upgrade", "--feature", "transaction.version=3") == (
        "Could not upgrade transaction.version to 3. The update failed for all features since the"
        " following feature had an error: Invalid update version 3 for feature transaction.version."
        " Local controller N only supports versions 0-2\n1 out of 1 operation(s) failed.")
    assert refused(nodes, "upgrade", "--feature", "nosuch.version=1") == (
        "Could not upgrade nosuch.version to 1. The update failed for all features since the"
        " following feature had an error: Invalid update version 1 for feature nosuch.version."
        " Local controller N does not support this feature.\n1 out of 1 operation(s) failed.")
    # two features, one bad: both fail, with the error of the one Kafka checks first
    reason = ("The update failed for all features since the following feature had an error: Invalid"
              " update version 5 for feature group.version. Local controller N only supports versions 0-1")
    assert refused(nodes, "upgrade", "--feature", "transaction.version=2",
                   "--feature", "group.version=5") == (
        f"Could not upgrade group.version to 5. {reason}\n"
        f"Could not upgrade transaction.version to 2. {reason}\n2 out of 2 operation(s) failed.")
    assert finalized(nodes, "transaction.version") == "1"
    assert ok(nodes, "upgrade", "--feature", "transaction.version=2") == \
        "transaction.version was upgraded to 2."
    until(lambda: transaction_protocol(nodes, topic) == 2, "a new producer uses transactions v2", 30)

    # group.version 0 turns the KIP-848 consumer group APIs off, 1 on again
    assert not heartbeat_refused(nodes)
    assert ok(nodes, "disable", "--feature", "group.version") == "group.version was disabled."
    until(lambda: heartbeat_refused(nodes), "ConsumerGroupHeartbeat is refused", 30)
    assert finalized(nodes, "group.version") == "0"
    assert ok(nodes, "upgrade", "--feature", "group.version=1") == "group.version was upgraded to 1."
    until(lambda: not heartbeat_refused(nodes), "ConsumerGroupHeartbeat is served", 30)

    # metadata.version: down within 4.x's unchanged metadata, never across a level that changed it
    assert ok(nodes, "downgrade", "--feature", "metadata.version=25") == \
        "metadata.version was downgraded to 25."
    assert refused(nodes, "downgrade", "--feature", "metadata.version=22") == (
        "Could not downgrade metadata.version to 22. The update failed for all features since the"
        " following feature had an error: Invalid metadata.version 22. Refusing to perform the requested"
        " downgrade because it might delete metadata information.\n1 out of 1 operation(s) failed.")
    assert refused(nodes, "upgrade", "--feature", "metadata.version=24") == (
        "Could not upgrade metadata.version to 24. The update failed for all features since the"
        " following feature had an error: Invalid update version 24 for feature metadata.version. Can't"
        " downgrade the version of this feature without setting the upgrade type to either safe or unsafe"
        " downgrade.\n1 out of 1 operation(s) failed.")
    assert ok(nodes, "upgrade", "--feature", "metadata.version=27") == "metadata.version was upgraded to 27."
    assert describe(nodes)[0]["metadata.version"][2] == "4.1-IV1"


def voters(nodes: ThreeNodes) -> list[dict[str, Any]]:
    """``kafka-metadata-quorum describe --status``'s CurrentVoters."""
    import json

    done = run_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server", nodes.bootstrap,
                    "describe", "--status")
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("CurrentVoters:"))
    found: list[dict[str, Any]] = json.loads(line.split(":", 1)[1])
    return found


def test_kraft_version_upgrade_of_a_static_quorum(nodes: ThreeNodes) -> None:
    unknown = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID: a static voter's directory id
    assert {v.get("directoryId", unknown) for v in voters(nodes)} == {unknown}
    assert ok(nodes, "upgrade", "--feature", "kraft.version=1", "--dry-run") == \
        "kraft.version can be upgraded to 1."
    assert finalized(nodes, "kraft.version") == "0"
    # the voters announced themselves to the leader (UpdateRaftVoter): the upgrade goes through
    assert ok(nodes, "upgrade", "--feature", "kraft.version=1") == "kraft.version was upgraded to 1."
    assert finalized(nodes, "kraft.version") == "1"
    after = until(lambda: (found := voters(nodes)) and all(
        v.get("directoryId", unknown) != unknown for v in found) and found,
        "the voters have directory ids", 30)
    assert sorted(v["id"] for v in after) == [1, 2, 3]
    assert ok(nodes, "upgrade", "--feature", "kraft.version=1") == "kraft.version was upgraded to 1."
    assert refused(nodes, "downgrade", "--feature", "kraft.version=0") == (
        "Could not downgrade kraft.version to 0. The update failed for all features since the following"
        " feature had an error: Invalid update version 0 for feature kraft.version. Can't downgrade the"
        " version of this feature.\n1 out of 1 operation(s) failed.")
    # every node's ApiVersions finalizes it
    for address in nodes.bootstrap.split(","):
        wire = WireClient(address)
        try:
            answer: Any = wire.request(ApiVersionsRequest(client_software_name="t",
                                                          client_software_version="1"), 3)
        finally:
            wire.close()
        levels = {f.name: f.max_version_level for f in answer.finalized_features}
        assert levels.get("kraft.version") == 1, (address, levels)
