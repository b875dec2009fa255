"""The KIP-848 consumer group protocol against real clients, on our broker and, as the control, on
Apache Kafka 4.1: Kafka's own ``VerifiableConsumer --group-protocol consumer`` and confluent-kafka
(librdkafka) with ``group.protocol=consumer``. Members join and leave while records flow; with
synchronous commits after every poll, every record is consumed, and a record is consumed twice only
when the commit after its first consumption failed.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from reference_broker.testing import BrokerFactory
from tests.oracles.kafka_tools import JavaProgram, create_topic, stop_all, wait_until, write_properties

pytestmark = [pytest.mark.slow]

PARTITIONS = 3
RECORDS = 1000
CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
SIGTERM_EXIT = 143


@pytest.fixture(params=["reference", "apache-kafka"])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    """A broker with the consumer group protocol: ours, or the session's Apache Kafka 4.1 node."""
    if request.param == "apache-kafka":
        request.applymarker(pytest.mark.apache_kafka)
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return broker_factory({"num.partitions": PARTITIONS}).bootstrap


@pytest.fixture
def kafka_jars() -> None:
    from tests.apache_kafka import require_apache_kafka

    require_apache_kafka()


def _produce(bootstrap: str, topic: str, numbers: range) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in numbers:
        producer.produce(topic, str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _expected(count: int) -> set[tuple[int, int]]:
    return {(i % PARTITIONS, i // PARTITIONS) for i in range(count)}


def _unexplained_repeats(consumptions: list[tuple[float, int, int, bool]]) -> list[tuple[int, int]]:
    """Records consumed again although the commit after an earlier consumption succeeded."""
    outcomes: dict[tuple[int, int], list[bool]] = defaultdict(list)
    for _, partition, offset, committed in sorted(consumptions):
        outcomes[(partition, offset)].append(committed)
    return sorted(key for key, seen in outcomes.items() if len(seen) > 1 and any(seen[:-1]))


# -- Kafka's VerifiableConsumer ------------------------------------------------------------------


def _java_consumptions(program: JavaProgram) -> list[tuple[float, int, int, bool]]:
    """(timestamp, partition, offset, committed) per record the program consumed."""
    found: list[tuple[float, int, int, bool]] = []
    pending: list[tuple[float, int, int]] = []
    for event in program.events():
        if event["name"] == "records_consumed":
            pending = [
                (event["timestamp"], part["partition"], offset)
                for part in event["partitions"]
                for offset in range(part["minOffset"], part["maxOffset"] + 1)
            ]
        elif event["name"] == "offsets_committed":
            found += [(*p, bool(event["success"])) for p in pending]
            pending = []
    return found + [(*p, False) for p in pending]


@pytest.mark.usefixtures("kafka_jars")
def test_verifiable_consumers_with_the_consumer_protocol_read_every_record(
    bootstrap: str, tmp_path: Path
) -> None:
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    group = f"kip848-group-{uuid.uuid4().hex[:8]}"
    config = write_properties(tmp_path / "consumer.properties", {"max.poll.records": 50})
    consumers = [
        JavaProgram(
            tmp_path,
            f"consumer-{n}",
            CONSUMER,
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--group-id",
            group,
            "--group-protocol",
            "consumer",
            "--consumer.config",
            str(config),
        )
        for n in range(2)
    ]

    def consumed() -> set[tuple[int, int]]:
        return {(p, o) for c in consumers for _, p, o, _ in _java_consumptions(c)}

    try:
        _produce(bootstrap, topic, range(RECORDS // 2))
        consumers[0].start()
        wait_until(lambda: len(consumed()) > 0, 90, "the first member's first records")
        consumers[1].start()
        wait_until(
            lambda: any(
                e["name"] == "partitions_assigned" and e["partitions"] for e in consumers[1].events()
            ),
            90,
            "partitions assigned to the second member",
        )
        _produce(bootstrap, topic, range(RECORDS // 2, RECORDS))
        wait_until(lambda: len(consumed()) >= RECORDS, 90, f"{RECORDS} records consumed by the group")
        for consumer in consumers:
            assert consumer.terminate() == SIGTERM_EXIT, consumer.stderr()
    finally:
        stop_all(consumers)

    for consumer in consumers:
        assert any(e["name"] == "shutdown_complete" for e in consumer.events()), consumer.stderr()
    assert consumed() == _expected(RECORDS)
    repeats = _unexplained_repeats([x for c in consumers for x in _java_consumptions(c)])
    assert repeats == [], f"{len(repeats)} records read twice after a successful commit: {repeats[:5]}"


# -- confluent-kafka (librdkafka) ----------------------------------------------------------------


class Member(threading.Thread):
    """A confluent-kafka consumer of the group that commits synchronously after every record."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, name: str, log: list[tuple[float, int, int, bool]]
    ):
        super().__init__(name=name, daemon=True)
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "client.id": name,
            }
        )
        self.topic = topic
        self.log = log
        self.stopping = threading.Event()
        self.assigned: set[int] = set()
        self.errors: list[str] = []

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        try:
            while not self.stopping.is_set():
                message = self.consumer.poll(0.2)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
                if message is None:
                    continue
                if message.error():
                    self.errors.append(str(message.error()))
                    continue
                try:
                    self.consumer.commit(message=message, asynchronous=False)
                    committed = True
                except confluent_kafka.KafkaException:
                    committed = False
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                self.log.append((time.monotonic(), partition, offset, committed))
        finally:
            self.consumer.close()

    def leave(self) -> None:
        self.stopping.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not close"


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        member.stopping.set()
    for member in started:
        member.join(60)


def test_confluent_kafka_members_join_and_leave_without_losing_or_repeating_records(
    bootstrap: str, members: list[Member]
) -> None:
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    group = f"kip848-group-{uuid.uuid4().hex[:8]}"
    log: list[tuple[float, int, int, bool]] = []

    def consumed() -> set[tuple[int, int]]:
        return {(p, o) for _, p, o, _ in list(log)}

    def add_member() -> Member:
        member = Member(bootstrap, group, topic, f"member-{len(members)}", log)
        members.append(member)
        member.start()
        return member

    batch = RECORDS // 4
    _produce(bootstrap, topic, range(batch))
    first = add_member()
    wait_until(lambda: len(consumed()) > 0, 60, "the first member's first records")
    for _ in range(2):
        joined = add_member()

        def has_partitions(member: Member = joined) -> bool:
            return bool(member.assigned)

        wait_until(has_partitions, 60, f"partitions for {joined.name}")
    _produce(bootstrap, topic, range(batch, 2 * batch))
    wait_until(lambda: len(consumed()) >= 2 * batch, 60, f"{2 * batch} records consumed")
    first.leave()
    wait_until(
        lambda: sum(len(m.assigned) for m in members[1:]) == PARTITIONS, 60, "the partitions handed over"
    )
    _produce(bootstrap, topic, range(2 * batch, RECORDS))
    wait_until(lambda: len(consumed()) >= RECORDS, 90, f"{RECORDS} records consumed")
    for member in members[1:]:
        member.leave()

    assert consumed() == _expected(RECORDS)
    assert _unexplained_repeats(log) == []
    assert all(not m.errors for m in members), [m.errors for m in members]


SESSION_MS = 6000
#: Kafka's settings for a short consumer-protocol session (its minimums are lowered to allow it).
SHORT_SESSION = {
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.session.timeout.ms": SESSION_MS,
    "group.consumer.heartbeat.interval.ms": 1000,
    "group.consumer.min.heartbeat.interval.ms": 1000,
}


@pytest.fixture(params=["reference", "apache-kafka"])
def short_session_bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    """A broker whose consumer-protocol members expire 6 s after their last heartbeat."""
    if request.param == "apache-kafka":
        request.applymarker(pytest.mark.apache_kafka)
        return str(request.getfixturevalue("apache_kafka_factory")(**SHORT_SESSION).bootstrap)
    return broker_factory({"num.partitions": PARTITIONS, **SHORT_SESSION}).bootstrap


@pytest.mark.usefixtures("kafka_jars")
def test_a_crashed_verifiable_consumer_is_expired_and_its_partitions_consumed_by_the_other(
    short_session_bootstrap: str, tmp_path: Path
) -> None:
    bootstrap = short_session_bootstrap
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    group = f"kip848-group-{uuid.uuid4().hex[:8]}"
    config = write_properties(tmp_path / "consumer.properties", {"max.poll.records": 20})
    consumers = [
        JavaProgram(
            tmp_path,
            f"consumer-{n}",
            CONSUMER,
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--group-id",
            group,
            "--group-protocol",
            "consumer",
            "--consumer.config",
            str(config),
        )
        for n in range(2)
    ]

    def consumed() -> set[tuple[int, int]]:
        return {(p, o) for c in consumers for _, p, o, _ in _java_consumptions(c)}

    def has_partitions(consumer: JavaProgram) -> bool:
        assigned: set[int] = set()
        for event in consumer.events():
            if event["name"] == "partitions_assigned":
                assigned |= {p["partition"] for p in event["partitions"]}
            elif event["name"] == "partitions_revoked":
                assigned -= {p["partition"] for p in event["partitions"]}
        return bool(assigned)

    try:
        _produce(bootstrap, topic, range(RECORDS // 2))
        for consumer in consumers:
            consumer.start()
        wait_until(lambda: all(has_partitions(c) for c in consumers), 90, "both members holding partitions")
        consumers[1].kill()
        _produce(bootstrap, topic, range(RECORDS // 2, RECORDS))
        wait_until(lambda: len(consumed()) >= RECORDS, 120, f"{RECORDS} records consumed by the group")
        assert consumers[0].terminate() == SIGTERM_EXIT, consumers[0].stderr()
    finally:
        stop_all(consumers)

    assert consumed() == _expected(RECORDS)
    repeats = _unexplained_repeats([x for c in consumers for x in _java_consumptions(c)])
    assert repeats == [], f"{len(repeats)} records read twice after a successful commit: {repeats[:5]}"


@pytest.fixture(params=["reference", "apache-kafka"])
def restartable(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> Any:
    """A single broker with ``bootstrap`` and ``restart(kill=True)``: ours, or a fresh Kafka node."""
    if request.param == "apache-kafka":
        request.applymarker(pytest.mark.apache_kafka)
        return request.getfixturevalue("apache_kafka_factory")()
    return broker_factory({"num.partitions": PARTITIONS})


@pytest.mark.usefixtures("kafka_jars")
def test_verifiable_consumers_go_on_after_the_coordinator_is_killed_and_restarted(
    restartable: Any, tmp_path: Path
) -> None:
    bootstrap = restartable.bootstrap
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    group = f"kip848-group-{uuid.uuid4().hex[:8]}"
    config = write_properties(tmp_path / "consumer.properties", {"max.poll.records": 20})
    consumers = [
        JavaProgram(
            tmp_path,
            f"consumer-{n}",
            CONSUMER,
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--group-id",
            group,
            "--group-protocol",
            "consumer",
            "--consumer.config",
            str(config),
        )
        for n in range(2)
    ]

    def consumed() -> set[tuple[int, int]]:
        return {(p, o) for c in consumers for _, p, o, _ in _java_consumptions(c)}

    try:
        _produce(bootstrap, topic, range(RECORDS // 2))
        for consumer in consumers:
            consumer.start()
        wait_until(lambda: len(consumed()) >= RECORDS // 4, 90, "a quarter of the records consumed")
        restartable.restart(kill=True)
        _produce(bootstrap, topic, range(RECORDS // 2, RECORDS))
        wait_until(lambda: len(consumed()) >= RECORDS, 120, f"{RECORDS} records consumed by the group")
        for consumer in consumers:
            assert consumer.terminate() == SIGTERM_EXIT, consumer.stderr()
    finally:
        stop_all(consumers)

    assert consumed() == _expected(RECORDS)
    repeats = _unexplained_repeats([x for c in consumers for x in _java_consumptions(c)])
    assert repeats == [], f"{len(repeats)} records read twice after a successful commit: {repeats[:5]}"


GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def _masked(row: list[str], member_ids: set[str]) -> list[str]:
    """The row with member ids, hosts, addresses and coordinator ids as ``*``."""
    return [
        "*"
        if cell in member_ids or cell.startswith(("/", "(")) or (":" in cell and "TOPIC" not in cell)
        else cell
        for cell in row
    ]


def _group_command_views(bootstrap: str) -> list[list[list[str]]]:
    """kafka-consumer-groups' describe views of a consumer-protocol group with one member that
    committed 20 of 30 records: rows of columns, ids, hosts and ports masked."""
    from tests.oracles.kafka_tools import run_tool

    topic, group = f"kip848-{uuid.uuid4().hex[:8]}", f"kip848-group-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    _produce(bootstrap, topic, range(30))
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "client.id": "viewer",
        }
    )
    views = []
    try:
        consumer.subscribe([topic])
        taken: list[Any] = []
        deadline = time.monotonic() + 60
        while len(taken) < 30 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                taken.append(message)
        assert len(taken) == 30
        for message in taken:
            if message.offset() < 5:  # commit the first 5 of each partition
                consumer.commit(message=message, asynchronous=False)
        for args in (["--describe"], ["--describe", "--members", "--verbose"], ["--describe", "--state"]):
            done = run_tool(GROUP_COMMAND, "--bootstrap-server", bootstrap, "--group", group, *args)
            assert done.returncode == 0, done.stderr
            masked = done.stdout.replace(group, "GROUP").replace(topic, "TOPIC")
            rows = [line.split() for line in masked.splitlines() if line.strip()]
            member_ids = {row[i] for row in rows for i, cell in enumerate(row) if len(cell) == 22}
            views.append(rows[:1] + sorted(_masked(row, member_ids) for row in rows[1:]))
    finally:
        consumer.close()
    return views


@pytest.mark.usefixtures("kafka_jars")
def test_kafka_consumer_groups_tool_describes_a_consumer_group_as_on_kafka(
    broker_factory: BrokerFactory, apache_kafka: Any
) -> None:
    ours = _group_command_views(broker_factory({"num.partitions": PARTITIONS}).bootstrap)
    kafka = _group_command_views(apache_kafka.bootstrap)
    assert ours == kafka


class Copier(threading.Thread):
    """A consume-transform-produce member (confluent-kafka): each poll's records are copied to the
    output topic and their offsets committed in one transaction; an abortable error aborts it and
    rewinds to the committed offsets."""

    def __init__(self, bootstrap: str, group: str, source: str, sink: str, name: str):
        super().__init__(name=name, daemon=True)
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "client.id": name,
            }
        )
        self.producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"{group}-{name}", "linger.ms": 5}
        )
        self.source, self.sink = source, sink
        self.stopping = threading.Event()
        self.assigned: set[int] = set()
        self.commits = 0
        self.copied = 0  # records in committed transactions
        self.aborts = 0

    def run(self) -> None:
        self.producer.init_transactions(30)
        self.consumer.subscribe([self.source])
        try:
            while not self.stopping.is_set():
                messages = [m for m in self.consumer.consume(50, 0.2) if not m.error()]
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
                if messages:
                    self._copy(messages)
        finally:
            self.consumer.close()

    def _copy(self, messages: list[Any]) -> None:
        self.producer.begin_transaction()
        try:
            for m in messages:
                self.producer.produce(self.sink, m.value(), partition=m.partition())
            positions = self.consumer.position(self.consumer.assignment())
            self.producer.send_offsets_to_transaction(positions, self.consumer.consumer_group_metadata(), 30)
            self.producer.commit_transaction(30)
            self.commits += 1
            self.copied += len(messages)
        except confluent_kafka.KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise
            self.producer.abort_transaction(30)
            self.aborts += 1
            committed = self.consumer.committed(self.consumer.assignment(), 30)
            for tp in committed:
                if tp.offset < 0:
                    tp.offset = confluent_kafka.OFFSET_BEGINNING
                self.consumer.seek(tp)

    def leave(self) -> None:
        self.stopping.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not close"


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[Any]:
    reader = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    values: list[Any] = []
    try:
        reader.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(values) < expected:
            message = reader.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
        end = time.monotonic() + 2  # anything beyond the expected count shows up here
        while time.monotonic() < end:
            message = reader.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
    finally:
        reader.close()
    return values


def test_transactional_copiers_of_a_consumer_protocol_group_copy_every_record_once(bootstrap: str) -> None:
    source, sink = f"kip848-in-{uuid.uuid4().hex[:8]}", f"kip848-out-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    group = f"kip848-eos-{uuid.uuid4().hex[:8]}"
    copiers: list[Copier] = []
    try:
        _produce(bootstrap, source, range(RECORDS // 2))
        copiers.append(Copier(bootstrap, group, source, sink, "copier-0"))
        copiers[0].start()
        wait_until(lambda: copiers[0].commits > 0, 60, "the first copier's first transaction")
        copiers.append(Copier(bootstrap, group, source, sink, "copier-1"))
        copiers[1].start()
        wait_until(lambda: bool(copiers[1].assigned), 60, "partitions for the second copier")
        _produce(bootstrap, source, range(RECORDS // 2, RECORDS))
        copiers[0].leave()
        wait_until(lambda: len(copiers[1].assigned) == PARTITIONS, 60, "the partitions handed over")
        wait_until(lambda: sum(c.copied for c in copiers) >= RECORDS, 90, "every record copied")
    finally:
        for copier in copiers:
            copier.stopping.set()
        for copier in copiers:
            copier.join(60)
    values = sorted(int(v) for v in _read_committed(bootstrap, sink, RECORDS))
    assert values == list(range(RECORDS))


def test_partitions_added_to_a_subscribed_topic_are_assigned_and_consumed(
    bootstrap: str, members: list[Member]
) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    log: list[tuple[float, int, int, bool]] = []
    member = Member(bootstrap, f"kip848-group-{uuid.uuid4().hex[:8]}", topic, "member-0", log)
    members.append(member)
    member.start()
    wait_until(lambda: member.assigned == set(range(PARTITIONS)), 60, "every partition assigned")
    grown = PARTITIONS + 2
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, grown)])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(grown * 10):
        producer.produce(topic, str(i).encode(), partition=i % grown)
    assert producer.flush(30) == 0
    wait_until(lambda: member.assigned == set(range(grown)), 90, "the new partitions assigned")
    wait_until(lambda: len({(p, o) for _, p, o, _ in list(log)}) >= grown * 10, 60, "every record consumed")
    member.leave()
    assert {(p, o) for _, p, o, _ in log} == {(p, o) for p in range(grown) for o in range(10)}
