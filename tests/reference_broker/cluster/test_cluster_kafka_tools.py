"""Kafka's own command-line tools operate a three-node cluster, ours as Kafka's: a reassignment
planned, executed and verified with ``kafka-reassign-partitions``, a preferred leader election
with ``kafka-leader-election``, ``kafka-topics --describe`` showing leader, replicas and ISR
after each step, and the records written before the moves read back whole from the new replicas.
The same scenario runs on Apache Kafka's three-node cluster as the oracle.

And the controller's failover: the active controller (``kafka-metadata-quorum describe
--status``) is killed with SIGKILL while topics are being created and a follower's ISR changes;
another voter leads in a higher epoch and every topic whose creation was acknowledged is there,
with all its partitions, on every node.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.apache_kafka import require_apache_kafka
from tests.oracles.kafka_tools import run_tool
from tests.reference_broker.cluster.three_nodes import KafkaNodes, ThreeNodes, until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.apache_kafka]

RECORDS = 200


def tool(main_class: str, *args: str) -> str:
    """Run one of Kafka's tools; its stdout (the test fails with its stderr when it exits non-zero)."""
    done = run_tool(f"org.apache.kafka.tools.{main_class}", *args)
    assert done.returncode == 0, f"{main_class} {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def describe(bootstrap: str, topic: str) -> dict[int, dict[str, str]]:
    """``kafka-topics --describe``: partition -> its ``Leader``, ``Replicas`` and ``Isr`` columns."""
    out = tool("TopicCommand", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    found: dict[int, dict[str, str]] = {}
    for line in out.splitlines():
        if "Partition: " not in line:
            continue
        fields = dict(re.findall(r"(\w+): (\S*)", line))
        found[int(fields["Partition"])] = fields
    return found


def produce(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                         "enable.idempotence": True})
    sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    failures: list[Any] = []
    for p in range(partitions):
        for i in range(RECORDS):
            value = f"{p}-{i:05d}".encode()
            producer.produce(topic, value, partition=p,
                             on_delivery=lambda err, _m: failures.append(err) if err else None)
            sent[p].append(value)
    assert producer.flush(60) == 0 and not failures, failures
    return sent


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, got.values())) < partitions * RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got[message.partition()].append(message.value())
    finally:
        consumer.close()
    return got


def test_kafka_tools_reassign_a_partition_and_elect_its_preferred_leader(
    nodes: ThreeNodes, tmp_path: Path
) -> None:
    bootstrap = nodes.bootstrap
    topic = f"moves-{uuid.uuid4().hex[:8]}"
    tool("TopicCommand", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
         "--replica-assignment", "1:2,2:3")
    until(lambda: all(d["Isr"].count(",") == 1 for d in describe(bootstrap, topic).values()),
          f"{topic}'s replicas are in sync", 60)
    sent = produce(bootstrap, topic, 2)

    moves = tmp_path / "topics.json"
    moves.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = tool("reassign.ReassignPartitionsCommand", "--bootstrap-server", bootstrap, "--generate",
                     "--topics-to-move-json-file", str(moves), "--broker-list", "1,2,3")
    current = json.loads(generated.split("Current partition replica assignment")[1].split("\n")[1])
    assignment = sorted((p["partition"], p["replicas"]) for p in current["partitions"])
    assert assignment == [(0, [1, 2]), (1, [2, 3])], generated

    # Partition 0 moves from {1, 2} to {3, 1}: node 3 joins, node 2 leaves, node 1 (the leader)
    # stays, so leadership does not move with it and node 3 becomes the preferred leader.
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [3, 1], "log_dirs": ["any", "any"]},
    ]}))
    executed = tool("reassign.ReassignPartitionsCommand", "--bootstrap-server", bootstrap, "--execute",
                    "--reassignment-json-file", str(plan))
    assert "Successfully started partition reassignment" in executed, executed
    verify = ("reassign.ReassignPartitionsCommand", "--bootstrap-server", bootstrap, "--verify",
              "--reassignment-json-file", str(plan))
    until(lambda: "is completed" in tool(*verify), "kafka-reassign-partitions --verify says done", 90)
    after = describe(bootstrap, topic)
    assert after[0]["Replicas"] == "3,1" and sorted(after[0]["Isr"].split(",")) == ["1", "3"], after
    assert after[0]["Leader"] == "1", after
    assert after[1]["Replicas"] == "2,3", after

    elected = tool("LeaderElectionCommand", "--bootstrap-server", bootstrap, "--election-type",
                   "PREFERRED", "--topic", topic, "--partition", "0")
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in elected, elected
    until(lambda: describe(bootstrap, topic)[0]["Leader"] == "3", "node 3 leads partition 0", 30)
    # Nothing to do for a partition its preferred leader already leads: Kafka says so.
    again = run_tool("org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", bootstrap,
                     "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert "Valid replica already elected for partitions" in again.stdout + again.stderr, again

    assert read_all(bootstrap, topic, 2) == sent


def active_controller(bootstrap: str) -> tuple[int, int]:
    """(leader id, epoch) of the metadata quorum, from ``kafka-metadata-quorum describe --status``."""
    out = tool("MetadataQuorumCommand", "--bootstrap-server", bootstrap, "describe", "--status")
    fields = dict(re.findall(r"^(\w+):\s+(\S+)", out, re.MULTILINE))
    return int(fields["LeaderId"]), int(fields["LeaderEpoch"])


def test_killing_the_active_controller_while_topics_are_created_loses_no_metadata(
    nodes: ThreeNodes,
) -> None:
    require_apache_kafka()
    leader, epoch = active_controller(nodes.bootstrap)
    prefix = f"ctl-{uuid.uuid4().hex[:6]}"
    created: list[str] = []
    errors: list[BaseException] = []
    halfway = threading.Event()

    def create_topics() -> None:
        """Topics one by one, each retried until acknowledged (a retry of an acknowledged creation
        answers TOPIC_ALREADY_EXISTS, which also counts)."""
        try:
            for i in range(16):
                name = f"{prefix}-{i}"
                deadline = time.monotonic() + 120
                while True:
                    admin = AdminClient({"bootstrap.servers": nodes.bootstrap_without(leader)})
                    try:
                        admin.create_topics([NewTopic(name, 3, 3)], operation_timeout=20)[name].result(30)
                        break
                    except (confluent_kafka.KafkaException, TimeoutError) as exc:
                        if isinstance(exc, confluent_kafka.KafkaException) and (
                                exc.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS):
                            break
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.5)
                created.append(name)
                if i == 5:
                    halfway.set()
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            halfway.set()

    follower = next(n for n in (1, 2, 3) if n != leader)
    creator = threading.Thread(target=create_topics, daemon=True)
    creator.start()
    assert halfway.wait(120)
    # An ISR change in flight: the follower, cut off, leaves every ISR. Kafka's nodes cannot be
    # cut off, only stopped, and a second JVM down loses its quorum for a whole restart: there
    # the controller alone is killed.
    cut = not isinstance(nodes, KafkaNodes)
    if cut:
        nodes.cut_off(follower)
    nodes.crash_and_restart(leader)
    if cut:
        nodes.bring_back(follower)
    creator.join(400)
    assert not creator.is_alive() and not errors, errors
    if isinstance(nodes, KafkaNodes):
        nodes.settle()

    new_leader, new_epoch = until(lambda: active_controller(nodes.bootstrap), "a controller leads", 60)
    assert new_epoch > epoch, (leader, epoch, new_leader, new_epoch)
    names = [f"{prefix}-{i}" for i in range(16)]
    assert created == names

    def every_node_has_every_topic() -> bool:
        for node_bootstrap in nodes.bootstrap.split(","):
            admin = AdminClient({"bootstrap.servers": node_bootstrap, "socket.timeout.ms": 3000})
            try:
                topics = admin.list_topics(timeout=5).topics
            except confluent_kafka.KafkaException:
                return False
            if any(name not in topics or len(topics[name].partitions) != 3 for name in names):
                return False
        return True

    until(every_node_has_every_topic, "every node lists every created topic with 3 partitions", 60)

    def isrs_whole() -> bool:
        topics = AdminClient({"bootstrap.servers": nodes.bootstrap}).list_topics(timeout=10).topics
        parts = [part for name in names for part in topics[name].partitions.values()]
        return all(sorted(part.isrs) == [1, 2, 3] for part in parts)

    until(isrs_whole, "every partition's ISR is whole again", 120)
    described = describe(nodes.bootstrap, names[-1])  # and Kafka's tool agrees
    assert all(sorted(d["Isr"].split(",")) == ["1", "2", "3"] for d in described.values()), described



def test_a_client_that_met_the_cluster_as_its_controller_died_creates_topics_at_once(
    nodes: ThreeNodes,
) -> None:
    """A broker's Metadata names an alive broker as the controller (clients cannot reach the
    quorum; any broker forwards their requests). Naming the node of a controller that just died,
    still unfenced for a session, left librdkafka waiting for that node to come back before it
    sent CreateTopics: the call timed out with "Failed while waiting for controller"."""
    leader, _ = active_controller(nodes.bootstrap)
    survivors = nodes.bootstrap_without(leader)
    nodes.cut_off(leader)
    try:
        admin = AdminClient({"bootstrap.servers": survivors})
        name = f"after-controller-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(name, 2, 3)], operation_timeout=30)[name].result(60)
        # The answering broker may learn the topic a moment after the controller created it (seen
        # on Kafka's cluster: UNKNOWN_TOPIC_OR_PARTITION right after the creation's answer).
        until(lambda: len(admin.list_topics(name, timeout=10).topics[name].partitions) == 2,
              f"{name} listed with its 2 partitions", 30)
    finally:
        nodes.bring_back(leader)
