"""Produce and fetch throughput over TLS and SASL against plaintext: one broker with a PLAINTEXT, an
SSL, a SASL_PLAINTEXT and a SASL_SSL listener (SASL with SCRAM-SHA-256), the reference broker and
Apache Kafka (one KRaft node, ``tests/apache_kafka.py``) configured alike, confluent-kafka as the
client on both.

    python benchmarks/bench_security.py [--messages 100000] [--value-bytes 1024] [--runs 3] [--warm-up 20000]
                                        [--listeners PLAINTEXT,SSL,SASL_PLAINTEXT,SASL_SSL]
                                        [--brokers reference,kafka]

Each broker starts once with all four listeners, its certificate from a test CA made here
(``tests/kafka_security.make_pki``; the client verifies it against that CA) and the SCRAM
credential of one user (ours through AlterUserScramCredentials, Kafka's through ``kafka-storage
format --add-scram``, which Kafka applies before its SASL listeners serve). Every run, each broker
in turn (their order alternating between runs) and each listener in turn (the order rotating
between runs): a new one-partition topic, ``--messages`` records produced over that listener
(acks=all, idempotent), then read back over it. Before the first run, ``--warm-up`` records go
the same way over every listener of both brokers, untimed: Kafka's JVM compiles its hot paths
while it runs. The clocks start once the connection is up and authenticated (a first record is
delivered, or a first fetch answered, untimed), so the figures are the transfer's, not the
handshakes'.

Printed: per broker and listener the median records/s and MB/s of each phase, and the median of
the per-run ratios to PLAINTEXT on the same broker (the two figures of a ratio come from the same
run); then per listener the paired ratio reference/Kafka.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin  # ck.admin is not imported by confluent_kafka itself
from _common import spread, spread_name  # a script beside this one
from _kafka import KafkaCluster, unavailable_reason

from reference_broker.testing import BrokerProcess
from tests.apache_kafka import free_port
from tests.kafka_security import PASSWORD, USER, Pki, make_pki

BROKERS = ("reference", "kafka")
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISM = "SCRAM-SHA-256"
PHASES = ("produce", "fetch")


class Target:
    """A broker with one listener per security protocol, named after it (``ports``), and the PKI
    its TLS listeners use."""

    name: str
    ports: dict[str, int]
    pki: Pki

    def client_config(self, listener: str) -> dict[str, Any]:
        """librdkafka settings for ``listener``."""
        config: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{self.ports[listener]}",
            "security.protocol": listener,
        }
        if "SSL" in listener:
            config["ssl.ca.location"] = str(self.pki.ca)
        if "SASL" in listener:
            config.update({"sasl.mechanisms": MECHANISM, "sasl.username": USER, "sasl.password": PASSWORD})
        return config


def _listener_ports() -> dict[str, int]:
    return {name: free_port() for name in LISTENERS}


def _tls_properties(pki: Pki) -> dict[str, Any]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "sasl.enabled.mechanisms": MECHANISM,
    }


class ReferenceTarget(Target):
    name = "reference"

    def __init__(self, directory: Path) -> None:
        self.pki = make_pki(directory / "pki")
        self.ports = _listener_ports()
        listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        self._broker = BrokerProcess(config={"listeners": listeners, **_tls_properties(self.pki)})

    def __enter__(self) -> ReferenceTarget:
        self._broker.__enter__()
        try:
            admin = ck.admin.AdminClient(self.client_config("PLAINTEXT"))
            credential = ck.admin.UserScramCredentialUpsertion(
                USER,
                ck.admin.ScramCredentialInfo(ck.admin.ScramMechanism.SCRAM_SHA_256, 8192),
                PASSWORD.encode(),
            )
            admin.alter_user_scram_credentials([credential])[USER].result(30)
        except BaseException:
            self._broker.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._broker.__exit__(None, None, None)


class KafkaTarget(Target):
    name = "kafka"

    def __init__(self, directory: Path) -> None:
        self.pki = make_pki(directory / "pki")
        self._cluster = KafkaCluster(directory / "kafka", 1)
        node = self._cluster.nodes[0]
        self.ports = {**_listener_ports(), "PLAINTEXT": node.port}
        advertised = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        protocols = ",".join(f"{name}:{name}" for name in LISTENERS)
        properties: dict[str, Any] = {
            "listeners": f"{advertised},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": advertised,
            "listener.security.protocol.map": f"{protocols},CONTROLLER:PLAINTEXT",
            **_tls_properties(self.pki),
        }
        for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
            properties[f"listener.name.{listener.lower()}.{MECHANISM.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        node._properties.update(properties)
        node.format_args = ["--add-scram", f"{MECHANISM}=[name={USER},password={PASSWORD}]"]

    def __enter__(self) -> KafkaTarget:
        try:
            self._cluster.start()
        except BaseException:
            self._cluster.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._cluster.stop()


def produce(config: dict[str, Any], topic: str, messages: int, value: bytes) -> float:
    """Seconds to produce ``messages`` records, from a producer already connected and
    authenticated (its first record delivered) to the last acknowledgement."""
    producer = ck.Producer(
        {
            **config,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    producer.produce(topic, value, partition=0)
    if producer.flush(30):
        raise RuntimeError(f"{config['security.protocol']}: the first record was not delivered")
    failures: list[ck.KafkaError] = []

    def on_delivery(err: ck.KafkaError | None, _msg: ck.Message) -> None:
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(300)
    elapsed = time.perf_counter() - start
    if remaining or failures:
        raise RuntimeError(f"produce failed: {remaining} undelivered, errors {failures[:3]}")
    return elapsed


def fetch(config: dict[str, Any], topic: str, messages: int) -> tuple[int, float]:
    """(records timed, seconds) reading the topic's last ``messages`` records back. The clock
    starts when the first batch arrives (connection and authentication are behind it) and stops
    after the batch with the last record; the first batch's records are not counted."""
    consumer = ck.Consumer(
        {
            **config,
            "group.id": f"bench-{uuid.uuid4().hex}",  # required by librdkafka, unused with assign()
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "queued.min.messages": 1_000_000,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=30)
        consumer.assign([ck.TopicPartition(topic, 0, high - messages)])
        count = untimed = 0
        chunk = min(10_000, max(1, messages // 10))  # batches enough to time, even for few records
        start = last = None
        deadline = time.monotonic() + 300
        while count < messages:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fetched {count} of {messages} records in 300 s")
            batch = consumer.consume(min(chunk, messages - count), timeout=1.0)
            received = time.perf_counter()
            for msg in batch:
                if msg.error() is not None:
                    raise RuntimeError(f"fetch failed: {msg.error()}")
            if batch:
                if start is None:
                    start, untimed = received, len(batch)
                count += len(batch)
                last = time.perf_counter()
    finally:
        consumer.close()
    assert start is not None and last is not None
    if count == untimed:
        raise RuntimeError(f"all {count} records came in one batch: too few to time")
    return count - untimed, last - start


Rates = dict[tuple[str, str, str], list[float]]  # (broker, listener, phase) -> records/s per run


def _round_trip(target: Target, listener: str, messages: int, value: bytes) -> tuple[float, float]:
    """Produce then fetch ``messages`` records over ``listener`` on a new topic: records/s of each."""
    admin = ck.admin.AdminClient(target.client_config("PLAINTEXT"))
    topic = f"bench-security-{uuid.uuid4().hex[:8]}"
    admin.create_topics([ck.admin.NewTopic(topic, 1, 1)])[topic].result(30)
    config = target.client_config(listener)
    produced = messages / produce(config, topic, messages, value)
    count, seconds = fetch(config, topic, messages)
    admin.delete_topics([topic])[topic].result(60)
    return produced, count / seconds


def run(
    targets: list[Target], listeners: list[str], messages: int, value: bytes, runs: int, warm_up: int
) -> Rates:
    """Every (broker, listener) once per run, the brokers' order alternating and the listeners'
    rotating from run to run, so a slow spell of the machine does not fall on one alone; first
    ``warm_up`` records over every listener of every broker, untimed."""
    rates: Rates = {}
    for number in range(-1 if warm_up else 0, runs):
        if number < 0:  # untimed: Kafka's JVM compiles its hot paths (TLS's too) as it runs
            for target in targets:
                for listener in listeners:
                    _round_trip(target, listener, warm_up, value)
            continue
        order = targets if number % 2 == 0 else list(reversed(targets))
        shift = number % len(listeners)
        for target in order:
            for listener in listeners[shift:] + listeners[:shift]:
                produced, fetched = _round_trip(target, listener, messages, value)
                rates.setdefault((target.name, listener, "produce"), []).append(produced)
                rates.setdefault((target.name, listener, "fetch"), []).append(fetched)
                print(
                    f"  run {number + 1} {target.name} {listener}: produce {produced:,.0f}/s,"
                    f" fetch {fetched:,.0f}/s",
                    file=sys.stderr,
                )
    return rates


def _paired(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True)]


def print_tables(rates: Rates, brokers: list[str], listeners: list[str], value_bytes: int, runs: int) -> None:
    """Per broker and listener: medians and the ratio to PLAINTEXT; then reference/Kafka."""
    head = "".join(
        f" {p + ' rec/s':>14} {'MB/s':>8} {'/PLAINTEXT':>10} {spread_name(runs):>11}" for p in PHASES
    )
    print(f"{'broker':>10} {'listener':>15}{head}")
    for broker in brokers:
        for listener in listeners:
            cells = ""
            for phase in PHASES:
                figures = rates[(broker, listener, phase)]
                rate = statistics.median(figures)
                base = rates.get((broker, "PLAINTEXT", phase))
                shown = f"{'':>10} {'':>11}"
                if base is not None:
                    ratios = _paired(figures, base)
                    low, high = spread(ratios)
                    shown = f"{statistics.median(ratios):10.2f} {f'{low:.2f}-{high:.2f}':>11}"
                cells += f" {rate:14,.0f} {rate * value_bytes / 1e6:8.1f} {shown}"
            print(f"{broker:>10} {listener:>15}{cells}")
    if set(BROKERS) <= set(brokers):
        print()
        print(
            f"{'listener':>15}" + "".join(f" {p + ' ref/kafka':>17} {spread_name(runs):>11}" for p in PHASES)
        )
        for listener in listeners:
            cells = ""
            for phase in PHASES:
                ratios = _paired(rates[("reference", listener, phase)], rates[("kafka", listener, phase)])
                low, high = spread(ratios)
                cells += f" {statistics.median(ratios):17.2f} {f'{low:.2f}-{high:.2f}':>11}"
            print(f"{listener:>15}{cells}")


def _choose(
    parser: argparse.ArgumentParser, option: str, text: str | None, known: tuple[str, ...]
) -> list[str]:
    names = list(known) if text is None else [n.strip() for n in text.split(",") if n.strip()]
    if not names or set(names) - set(known):
        parser.error(f"{option} takes some of {', '.join(known)}, not {text!r}")
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def started(names: list[str], directory: Path) -> Iterator[list[Target]]:
    """Every named broker, up for the whole measurement and stopped afterwards."""
    with contextlib.ExitStack() as stack:
        targets: list[Target] = []
        for name in names:
            kind = ReferenceTarget if name == "reference" else KafkaTarget
            targets.append(stack.enter_context(kind(directory / name)))
        yield targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warm-up", type=int, default=20_000, help="untimed records per listener first")
    parser.add_argument("--listeners", default=None, help=f"comma-separated, of {', '.join(LISTENERS)}")
    parser.add_argument("--brokers", default=None, help=f"comma-separated, of {', '.join(BROKERS)}")
    args = parser.parse_args()
    if args.messages < 2 or args.runs < 1 or args.value_bytes < 1 or args.warm_up == 1 or args.warm_up < 0:
        parser.error("--messages and --warm-up (unless 0) must be at least 2, --runs and --value-bytes 1")
    listeners = _choose(parser, "--listeners", args.listeners, LISTENERS)
    brokers = _choose(parser, "--brokers", args.brokers, BROKERS)
    if "kafka" in brokers and (reason := unavailable_reason()) is not None:
        print(f"Apache Kafka skipped: {reason}", file=sys.stderr)
        brokers.remove("kafka")
        if not brokers:
            parser.error("no broker left to measure")
    print(
        f"{args.messages:,} records of {args.value_bytes} bytes per listener, acks=all, idempotent,"
        f" SASL {MECHANISM}; median of {args.runs}"
    )
    value = os.urandom(args.value_bytes)
    with (
        tempfile.TemporaryDirectory(prefix="bench-security-") as scratch,
        started(brokers, Path(scratch)) as targets,
    ):
        rates = run(targets, listeners, args.messages, value, args.runs, args.warm_up)
    print_tables(rates, brokers, listeners, args.value_bytes, args.runs)


if __name__ == "__main__":
    main()
