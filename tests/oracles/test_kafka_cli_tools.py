"""Kafka's command-line tools against our broker and against Apache Kafka, output compared.

Each operation is one run of a tool (``kafka-topics``, ``kafka-configs``, ``kafka-consumer-groups``,
``kafka-get-offsets``, ``kafka-delete-records``, ``kafka-transactions``, the console producer and
consumer, ``kafka-broker-api-versions``) in a subprocess of its own. The same sequence of operations
runs against both brokers on topics, groups and transactional ids of the same names, set up the same
way; each operation's output is reduced to what it means (a "view": ids, ports and clocks left
out) and the two views must be equal. Kafka's own run must end with the exit code the operation is
meant to have, so a scenario mistake cannot pass as agreement.

The tool families run in parallel (each family's operations in order), both brokers at once: a
JVM start costs 1-2 s and there are about 70 of them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from reference_broker.testing import BrokerProcess
from tests.oracles.kafka_tools import create_topic, run_tool

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.usefixtures("kafka_jars_available")]

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "kafka.admin.ConfigCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"

# Record timestamps of the get-offsets scenario: a minute back, well inside retention (Kafka
# deletes records older than its 7 days at its first retention check) and not in the future.
BASE_TIMESTAMP = (int(time.time()) - 60) * 1000
# Topic settings whose values both brokers report through kafka-configs --describe --all.
CORE_TOPIC_CONFIGS = (
    "cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms",
    "max.compaction.lag.ms", "max.message.bytes", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.type", "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms", "retention.bytes", "retention.ms", "segment.bytes", "segment.ms",
)
# APIs a Kafka 4 client or tool needs for produce, consume, groups, transactions and admin.
CORE_APIS = (
    "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch", "FindCoordinator",
    "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups", "ApiVersions",
    "CreateTopics", "DeleteTopics", "DeleteRecords", "InitProducerId", "AddPartitionsToTxn",
    "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit", "DescribeConfigs", "AlterConfigs",
    "CreatePartitions", "DeleteGroups", "IncrementalAlterConfigs", "OffsetDelete", "DescribeCluster",
    "DescribeProducers", "DescribeTransactions", "ListTransactions",
)


@dataclasses.dataclass(frozen=True)
class Names:
    """The names one scenario uses, the same on both brokers."""

    suffix: str

    def __getattr__(self, kind: str) -> str:
        return f"cli-{kind}-{self.suffix}"


@dataclasses.dataclass(frozen=True)
class Operation:
    """One tool run: its arguments (given the bootstrap and names), what its output means, the exit
    code Kafka gives it, and Python-side setup run before it."""

    name: str
    main_class: str
    args: Callable[[str, Names], list[str]]
    view: Callable[[subprocess.CompletedProcess[str]], Any]
    exit_code: int = 0
    stdin: str | None = None
    before: Callable[[str, Names], None] | None = None
    also: tuple[tuple[str, Callable[[subprocess.CompletedProcess[str]], Any]], ...] = ()
    """Further views of the same run, each compared as an operation of its own."""

    def views(self) -> list[tuple[str, Callable[[subprocess.CompletedProcess[str]], Any]]]:
        return [(self.name, self.view), *self.also]


@dataclasses.dataclass
class Outcome:
    exit_code: int
    view: Any
    output: str


# -- views ------------------------------------------------------------------------------------------


def _lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.rstrip() for line in result.stdout.splitlines() if line.strip()]


def _masked(text: str) -> str:
    text = re.sub(r"127\.0\.0\.1:\d+", "BROKER", text)
    return re.sub(r"TopicId: \S+", "TopicId: ID", text)


def stdout_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [_masked(line) for line in _lines(result)]


def sorted_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return sorted(stdout_lines(result))


def error_kind(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The exception names a failed run printed (their messages are free text)."""
    printed = result.stdout + result.stderr
    return sorted(set(re.findall(r"org\.apache\.kafka\.common\.errors\.(\w+)", printed)))


def error_text(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in stdout_lines(result) if "rror" in line and not line.startswith("\tat ")]


def topic_describe(result: subprocess.CompletedProcess[str]) -> list[str]:
    """kafka-topics --describe without the ELR columns (compared on their own) and without
    min.insync.replicas, which a KRaft Kafka sets cluster-wide at format time."""
    view = []
    for line in stdout_lines(result):
        line = re.sub(r"\tElr: .*$", "", line)
        line = re.sub(r"min\.insync\.replicas=1,?", "", line)
        view.append(line)
    return view


def topic_describe_elr(result: subprocess.CompletedProcess[str]) -> list[str]:
    return re.findall(r"Elr: [^\t]*\tLastKnownElr: .*", result.stdout)


def listed(*kinds: str) -> Callable[[subprocess.CompletedProcess[str]], list[str]]:
    """The scenario's names of these kinds among those a list prints (other tests and the other
    tool families make names of their own meanwhile)."""
    pattern = re.compile(rf"cli-({'|'.join(kinds)})-\w+$")

    def view(result: subprocess.CompletedProcess[str]) -> list[str]:
        return sorted(line.split()[0] for line in _lines(result) if pattern.match(line.split()[0]))

    return view


def config_values(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.split()[0] for line in _lines(result) if "=" in line.split()[0]]


def config_synonyms(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.strip() for line in _lines(result) if "synonyms=" in line]


def core_config_values(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    values = dict(line.split()[0].split("=", 1) for line in _lines(result) if "=" in line.split()[0])
    return {key: values.get(key, "<absent>") for key in CORE_TOPIC_CONFIGS}


def table(
    *columns: str, own: bool = False
) -> Callable[[subprocess.CompletedProcess[str]], list[tuple[str, ...]]]:
    """Rows of a tab- or space-aligned table reduced to the named columns (sorted); ``own``: only
    the rows naming this scenario's objects."""

    def view(result: subprocess.CompletedProcess[str]) -> list[tuple[str, ...]]:
        lines = _lines(result)
        header_at = next((i for i, line in enumerate(lines) if columns[0] in line.split()), None)
        if header_at is None:
            return [("no table", *stdout_lines(result))]
        header = lines[header_at].split()
        rows = [line.split() for line in lines[header_at + 1 :]]
        rows = [row for row in rows if len(row) == len(header) and (not own or "cli-" in " ".join(row))]
        return sorted(tuple(row[header.index(c)] for c in columns) for row in rows)

    return view


def producer_table(result: subprocess.CompletedProcess[str]) -> list[tuple[str, ...]]:
    """kafka-transactions describe-producers without producer ids and clocks, in sequence order."""
    rows = table("ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "CurrentTransactionStartOffset")(
        result
    )
    return sorted(rows, key=lambda row: row[2])


def api_usable_versions(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    found = dict(re.findall(r"\t(\w+)\(\d+\): .*?(UNSUPPORTED|usable: \d+)", result.stdout))
    return {api: found.get(api, "<absent>") for api in CORE_APIS}


# -- setup done in Python, the same on both brokers -----------------------------------------------------


def log_dirs(result: subprocess.CompletedProcess[str]) -> list[Any]:
    """kafka-log-dirs' JSON without paths and byte counts: per directory its error and, per
    partition, the offset lag, whether it is a future replica and whether it holds data."""
    lines = _lines(result)
    try:
        document = json.loads(lines[-1])
    except (IndexError, ValueError):
        return lines + result.stderr.splitlines()[-3:]
    return [
        (
            directory["error"],
            sorted(
                (p["partition"], p["offsetLag"], p["isFuture"], p["size"] > 0)
                for p in directory["partitions"]
            ),
        )
        for broker in document["brokers"]
        for directory in broker["logDirs"]
    ]


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, int | None]]) -> None:
    """(partition, value, timestamp) records, one batch each, in order."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, value, timestamp in records:
        producer.produce(topic, value, partition=partition, timestamp=timestamp or 0)
        assert producer.flush(30) == 0


def prepare_group(bootstrap: str, names: Names) -> None:
    create_topic(bootstrap, names.grouptopic, 2)
    _produce(bootstrap, names.grouptopic, [(i % 2, b"g%d" % i, None) for i in range(30)])
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": names.group})
    consumer.commit(
        offsets=[TopicPartition(names.grouptopic, 0, 4), TopicPartition(names.grouptopic, 1, 15)],
        asynchronous=False,
    )
    consumer.close()


def prepare_offsets(bootstrap: str, names: Names) -> None:
    """Partition 0 holds timestamps +1000, +3000, +2000, +3000, +1500 (one batch each): the
    maximum first at offset 1; partition 1 is empty."""
    create_topic(bootstrap, names.offsets, 2)
    deltas = (1000, 3000, 2000, 3000, 1500)
    _produce(bootstrap, names.offsets, [(0, b"o", BASE_TIMESTAMP + delta) for delta in deltas])


def prepare_transactions(bootstrap: str, names: Names) -> None:
    """An open transaction (5 records at offsets 0-4) and, after it, a committed one (offset 5)."""
    create_topic(bootstrap, names.txntopic, 1)
    open_txn = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": names.open, "transaction.timeout.ms": 600_000}
    )
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    for i in range(5):
        open_txn.produce(names.txntopic, b"aborted-%d" % i, partition=0)
    assert open_txn.flush(30) == 0
    done_txn = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": names.done})
    done_txn.init_transactions(30)
    done_txn.begin_transaction()
    done_txn.produce(names.txntopic, b"committed", partition=0)
    done_txn.commit_transaction(30)
    _KEEP_OPEN.append(open_txn)


_KEEP_OPEN: list[confluent_kafka.Producer] = []


def write_delete_spec(bootstrap: str, names: Names) -> None:
    create_topic(bootstrap, names.deletions, 2)
    _produce(bootstrap, names.deletions, [(i % 2, b"d", None) for i in range(20)])
    _delete_spec(bootstrap, names).write_text(
        '{"version": 1, "partitions": ['
        f'{{"topic": "{names.deletions}", "partition": 0, "offset": 4}}, '
        f'{{"topic": "{names.deletions}", "partition": 1, "offset": -1}}]}}'
    )
    _delete_spec(bootstrap, names, beyond=True).write_text(
        f'{{"version": 1, "partitions": [{{"topic": "{names.deletions}", "partition": 0, "offset": 500}}]}}'
    )


def _delete_spec(bootstrap: str, names: Names, beyond: bool = False) -> Path:
    port = bootstrap.rsplit(":", 1)[1]
    return Path(tempfile.gettempdir()) / f"{names.deletions}-{port}-{'beyond' if beyond else 'all'}.json"


# -- the operations -----------------------------------------------------------------------------------

TOPIC_OPS = [
    Operation("topics-create", TOPICS, lambda b, n: [
        "--bootstrap-server", b, "--create", "--topic", n.topic, "--partitions", "2",
        "--replication-factor", "1", "--config", "retention.ms=3600000"], stdout_lines),
    Operation("topics-create-existing", TOPICS, lambda b, n: [
        "--bootstrap-server", b, "--create", "--topic", n.topic, "--partitions", "1"], error_text, 1),
    Operation("topics-create-unknown-config", TOPICS, lambda b, n: [
        "--bootstrap-server", b, "--create", "--topic", n.badtopic, "--config", "no.such.config=1"],
        error_text, 1),
    Operation("topics-alter-partitions", TOPICS, lambda b, n: [
        "--bootstrap-server", b, "--alter", "--topic", n.topic, "--partitions", "3"], stdout_lines),
    Operation("topics-alter-fewer-partitions", TOPICS, lambda b, n: [
        "--bootstrap-server", b, "--alter", "--topic", n.topic, "--partitions", "2"], error_text, 1),
    Operation("topics-describe", TOPICS, lambda b, n: [
        "--bootstrap-server", b, "--describe", "--topic", n.topic], topic_describe,
        also=(("topics-describe-elr", topic_describe_elr),)),
    Operation("topics-describe-missing", TOPICS, lambda b, n: [
        "--bootstrap-server", b, "--describe", "--topic", n.missing], error_text, 1),
    Operation("topics-list", TOPICS, lambda b, n: ["--bootstrap-server", b, "--list"],
              listed("topic", "badtopic")),
    Operation("topics-delete", TOPICS, lambda b, n: [
        "--bootstrap-server", b, "--delete", "--topic", n.topic], stdout_lines),
    Operation("topics-list-after-delete", TOPICS, lambda b, n: ["--bootstrap-server", b, "--list"],
              listed("topic", "badtopic")),
]

_TOPIC_CONFIGS = ["--entity-type", "topics", "--entity-name"]
CONFIG_OPS = [
    Operation("configs-alter-add", CONFIGS, lambda b, n: [
        "--bootstrap-server", b, "--alter", *_TOPIC_CONFIGS, n.configtopic,
        "--add-config", "retention.ms=7200000,cleanup.policy=compact"], stdout_lines,
        before=lambda b, n: create_topic(b, n.configtopic, 1)),
    Operation("configs-describe", CONFIGS, lambda b, n: [
        "--bootstrap-server", b, "--describe", *_TOPIC_CONFIGS, n.configtopic], config_values,
        also=(("configs-describe-synonyms", config_synonyms),)),
    Operation("configs-alter-delete", CONFIGS, lambda b, n: [
        "--bootstrap-server", b, "--alter", *_TOPIC_CONFIGS, n.configtopic,
        "--delete-config", "cleanup.policy"], stdout_lines),
    Operation("configs-describe-all", CONFIGS, lambda b, n: [
        "--bootstrap-server", b, "--describe", "--all", *_TOPIC_CONFIGS, n.configtopic],
        core_config_values),
    Operation("configs-alter-invalid-value", CONFIGS, lambda b, n: [
        "--bootstrap-server", b, "--alter", *_TOPIC_CONFIGS, n.configtopic,
        "--add-config", "retention.ms=abc"], error_kind, 1),
    Operation("configs-alter-broker-default", CONFIGS, lambda b, n: [
        "--bootstrap-server", b, "--alter", "--entity-type", "brokers", "--entity-default",
        "--add-config", "log.cleaner.threads=1"], stdout_lines),
]

_GROUP = ["--group"]
GROUP_OPS = [
    Operation("groups-list", GROUPS, lambda b, n: ["--bootstrap-server", b, "--list"], listed("group"),
              before=prepare_group),
    Operation("groups-describe-lag", GROUPS, lambda b, n: [
        "--bootstrap-server", b, "--describe", *_GROUP, n.group],
        table("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID")),
    Operation("groups-describe-state", GROUPS, lambda b, n: [
        "--bootstrap-server", b, "--describe", "--state", *_GROUP, n.group],
        table("GROUP", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")),
    Operation("groups-reset-to-earliest-dry-run", GROUPS, lambda b, n: [
        "--bootstrap-server", b, "--reset-offsets", "--to-earliest", *_GROUP, n.group,
        "--topic", n.grouptopic, "--dry-run"], table("TOPIC", "PARTITION", "NEW-OFFSET")),
    Operation("groups-reset-to-earliest-execute", GROUPS, lambda b, n: [
        "--bootstrap-server", b, "--reset-offsets", "--to-earliest", *_GROUP, n.group,
        "--topic", n.grouptopic, "--execute"], table("TOPIC", "PARTITION", "NEW-OFFSET")),
    Operation("groups-delete-offsets", GROUPS, lambda b, n: [
        "--bootstrap-server", b, "--delete-offsets", *_GROUP, n.group, "--topic", f"{n.grouptopic}:1"],
        stdout_lines),
    Operation("groups-describe-after-reset", GROUPS, lambda b, n: [
        "--bootstrap-server", b, "--describe", "--offsets", *_GROUP, n.group],
        table("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")),
    Operation("groups-delete", GROUPS, lambda b, n: ["--bootstrap-server", b, "--delete", *_GROUP, n.group],
              stdout_lines),
]

OFFSET_OPS = [
    Operation("get-offsets-latest", GET_OFFSETS, lambda b, n: [
        "--bootstrap-server", b, "--topic", n.offsets, "--time", "-1"], sorted_lines, before=prepare_offsets),
    Operation("get-offsets-earliest", GET_OFFSETS, lambda b, n: [
        "--bootstrap-server", b, "--topic", n.offsets, "--time", "-2"], sorted_lines),
    Operation("get-offsets-max-timestamp", GET_OFFSETS, lambda b, n: [
        "--bootstrap-server", b, "--topic", n.offsets, "--time", "-3"], sorted_lines),
    Operation("get-offsets-by-timestamp", GET_OFFSETS, lambda b, n: [
        "--bootstrap-server", b, "--topic", n.offsets, "--time", str(BASE_TIMESTAMP + 2500)], sorted_lines),
    Operation("delete-records", DELETE_RECORDS, lambda b, n: [
        "--bootstrap-server", b, "--offset-json-file", str(_delete_spec(b, n))], sorted_lines,
        before=write_delete_spec),
    Operation("delete-records-beyond-end", DELETE_RECORDS, lambda b, n: [
        "--bootstrap-server", b, "--offset-json-file", str(_delete_spec(b, n, beyond=True))], sorted_lines),
]

TRANSACTION_OPS = [
    Operation("transactions-list", TRANSACTIONS, lambda b, n: ["--bootstrap-server", b, "list"],
              table("TransactionalId", "TransactionState", own=True), before=prepare_transactions),
    Operation("transactions-list-duration-filter", TRANSACTIONS, lambda b, n: [
        "--bootstrap-server", b, "list", "--duration-filter", "1"],
        table("TransactionalId", "TransactionState", own=True)),
    Operation("transactions-describe", TRANSACTIONS, lambda b, n: [
        "--bootstrap-server", b, "describe", "--transactional-id", n.open],
        table("TransactionalId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs",
              "TopicPartitions")),
    Operation("transactions-describe-producers", TRANSACTIONS, lambda b, n: [
        "--bootstrap-server", b, "describe-producers", "--topic", n.txntopic, "--partition", "0"],
        producer_table),
    Operation("transactions-find-hanging", TRANSACTIONS, lambda b, n: [
        "--bootstrap-server", b, "find-hanging", "--broker-id", "1"], stdout_lines),
    Operation("transactions-abort", TRANSACTIONS, lambda b, n: [
        "--bootstrap-server", b, "abort", "--topic", n.txntopic, "--partition", "0", "--start-offset", "0"],
        stdout_lines),
    Operation("transactions-describe-producers-after-abort", TRANSACTIONS, lambda b, n: [
        "--bootstrap-server", b, "describe-producers", "--topic", n.txntopic, "--partition", "0"],
        producer_table),
    Operation("console-consumer-read-committed", CONSOLE_CONSUMER, lambda b, n: [
        "--bootstrap-server", b, "--topic", n.txntopic, "--from-beginning", "--isolation-level",
        "read_committed", "--max-messages", "1", "--timeout-ms", "20000"], stdout_lines),
]

_CONSOLE_INPUT = "".join(f"h{i}:x{i}\tkey-{i}\tvalue-{i}\n" for i in range(12))
CONSOLE_OPS = [
    Operation("console-producer", CONSOLE_PRODUCER, lambda b, n: [
        "--bootstrap-server", b, "--topic", n.console, "--property", "parse.key=true",
        "--property", "parse.headers=true", "--producer-property", "acks=all"], stdout_lines,
        stdin=_CONSOLE_INPUT, before=lambda b, n: create_topic(b, n.console, 3)),
    Operation("console-consumer", CONSOLE_CONSUMER, lambda b, n: [
        "--bootstrap-server", b, "--topic", n.console, "--from-beginning", "--max-messages", "12",
        "--timeout-ms", "20000", "--property", "print.key=true", "--property", "print.headers=true",
        "--property", "print.partition=true", "--property", "print.offset=true"], sorted_lines),
    Operation("log-dirs-describe", LOG_DIRS, lambda b, n: [
        "--bootstrap-server", b, "--describe", "--topic-list", n.console], log_dirs),
    Operation("broker-api-versions", API_VERSIONS, lambda b, n: ["--bootstrap-server", b],
              api_usable_versions),
]

FAMILIES = [TOPIC_OPS, CONFIG_OPS, GROUP_OPS, OFFSET_OPS, TRANSACTION_OPS, CONSOLE_OPS]
VIEWS = [name for family in FAMILIES for op in family for name, _ in op.views()]

#: Operations whose outcome on ours is known to differ from Kafka's, with the reason: each runs as a
#: strict xfail, so the entry must go once the difference is fixed.
DIFFERENCES: dict[str, str] = {}


def _run_family(family: list[Operation], bootstrap: str, names: Names) -> dict[str, Outcome]:
    outcomes = {}
    for op in family:
        try:
            if op.before is not None:
                op.before(bootstrap, names)
            result = run_tool(op.main_class, *op.args(bootstrap, names), stdin=op.stdin, timeout=120)
            for name, view in op.views():
                outcomes[name] = Outcome(result.returncode, view(result), result.stdout + result.stderr)
        except Exception as exc:  # one broken step must not hide the rest of the family
            for name, _ in op.views():
                outcomes[name] = Outcome(-1, f"{type(exc).__name__}: {exc}", "")
    return outcomes


@pytest.fixture(scope="module")
def outcomes(apache_kafka: Any) -> Iterator[dict[str, dict[str, Outcome]]]:
    """Every operation's outcome on ours and on Kafka, run once for the module."""
    names = Names(uuid.uuid4().hex[:8])
    # Kafka's defaults where the embedded ones differ: two-phase commit off (InitProducerId v5).
    ours_config = {"transaction.two.phase.commit.enable": False}
    with BrokerProcess(config=ours_config) as ours, ThreadPoolExecutor(max_workers=6) as pool:
        runs = {
            (side, i): pool.submit(_run_family, family, bootstrap, names)
            for side, bootstrap in (("ours", ours.bootstrap), ("kafka", apache_kafka.bootstrap))
            for i, family in enumerate(FAMILIES)
        }
        results: dict[str, dict[str, Outcome]] = {"ours": {}, "kafka": {}}
        for (side, _), run in runs.items():
            results[side].update(run.result())
        try:
            yield results
        finally:
            for producer in _KEEP_OPEN:
                producer.abort_transaction(10)
            _KEEP_OPEN.clear()
            kinds = ("configtopic", "grouptopic", "offsets", "txntopic", "deletions", "console")
            AdminClient({"bootstrap.servers": apache_kafka.bootstrap}).delete_topics(
                [getattr(names, kind) for kind in kinds]
            )


_EXIT_CODES = {name: op.exit_code for family in FAMILIES for op in family for name, _ in op.views()}


@pytest.mark.parametrize(
    "operation",
    [
        pytest.param(name, marks=[pytest.mark.xfail(strict=True, reason=DIFFERENCES[name])])
        if name in DIFFERENCES
        else name
        for name in VIEWS
    ],
)
def test_tool_operation_behaves_as_on_kafka(operation: str, outcomes: dict[str, dict[str, Outcome]]) -> None:
    kafka, ours = outcomes["kafka"][operation], outcomes["ours"][operation]
    assert kafka.exit_code == _EXIT_CODES[operation], f"scenario broken on Kafka itself:\n{kafka.output}"
    assert (ours.exit_code, ours.view) == (kafka.exit_code, kafka.view), (
        f"\n--- ours:\n{ours.output}\n--- Kafka:\n{kafka.output}"
    )
