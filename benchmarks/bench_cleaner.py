"""Log cleaner throughput and memory: one compacted partition of ``--size`` bytes whose keys are 1%
distinct, cleaned by the reference broker and by Apache Kafka (one KRaft node, ``tests/apache_kafka.py``
through ``_kafka``) in the same run, the brokers taking turns run by run.

    python benchmarks/bench_cleaner.py [--size 1GB] [--runs 3] [--value-bytes 512]
                                       [--segment-bytes N] [--warm-up 64MB] [--brokers reference,kafka]

Each run creates a topic with ``cleanup.policy=compact`` and ``min.cleanable.dirty.ratio=1.0``, a
ratio no log can exceed, so nothing is cleaned while confluent-kafka fills it (records of
``--value-bytes`` random bytes, keys cycling through one per hundred records). Then
IncrementalAlterConfigs sets the ratio to 0.01 and the clock starts; it stops when the log's cleaner
checkpoint reaches the active segment's base offset, the end of what a pass may clean. Both
brokers write that checkpoint once a pass is done (ours ``<topic>-0/cleaner-offset-checkpoint``,
Kafka ``cleaner-offset-checkpoint`` in its log directory), and both check for work every
``log.cleaner.backoff.ms`` = 100 ms, so the figure is the same measurement on both: the bytes of
the inactive segments before the pass (read from the segment files) over the seconds it took.
Kafka's own figure (its cleaner logs "N MB of log processed in S seconds") is printed beside ours
as a check: it leaves out the wait for the cleaner to notice the config change.

Memory: the broker's peak resident set while cleaning, from ``VmHWM`` in /proc/<pid>/status after
resetting it (``/proc/<pid>/clear_refs``) when the clock starts; where the reset is refused, the
largest ``VmRSS`` sampled every 20 ms. The resident set before cleaning is printed beside it, as a
JVM's includes the heap it has grown to whatever the cleaner needs.

Before the first run each broker cleans a ``--warm-up`` log the same way, untimed: Kafka's JVM
compiles the cleaner's hot paths while it runs.

Segments are ``--segment-bytes`` (default a sixteenth of the log, at least Kafka 4's floor of
1 MiB and at most 64 MiB): a log in one segment has nothing to clean, as the active segment is
never cleaned. The last, partial segment stays dirty on both brokers and is not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import confluent_kafka as ck
import confluent_kafka.admin  # ck.admin is not imported by confluent_kafka itself
from _common import spread, spread_name  # a script beside this one
from _kafka import running_kafka, unavailable_reason

from reference_broker.testing import BrokerProcess

BROKERS = ("reference", "kafka")
SEGMENT_BYTES_MIN = 1024 * 1024
SEGMENT_BYTES_MAX = 64 * 1024 * 1024
KEY_SHARE = 100  # records per distinct key: 1% of the keys are distinct
CLEANER_BACKOFF_MS = 100
POLL_S = 0.02
CHECKPOINT_FILE = "cleaner-offset-checkpoint"
# Kafka's cleaner statistics: "\t1,024.0 MB of log processed in 12.3 seconds (83.2 MB/sec)."
KAFKA_STATS = re.compile(r"([\d,.]+) MB of log processed in ([\d,.]+) seconds")
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    """``1GB``, ``256MB``, ``64MiB``, ``0`` or a plain byte count; ArgumentTypeError otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1GB, 256MB, 64MiB, 1000000)")
    return int(float(match.group(1)) * _UNITS[unit])


def default_segment_bytes(size: int) -> int:
    """A sixteenth of the log, within Kafka 4's floor and 64 MiB."""
    return min(SEGMENT_BYTES_MAX, max(SEGMENT_BYTES_MIN, size // 16))


class Cleaned(NamedTuple):
    """One cleaning pass as measured from outside the broker."""

    cleaned_bytes: int  # the inactive segments' bytes before the pass
    after_bytes: int  # the same offsets' bytes after it
    seconds: float
    peak_rss: int  # bytes
    rss_before: int
    own_mbps: float | None  # the broker's own report, in MB/s (10^6), where it gives one

    @property
    def mbps(self) -> float:
        return self.cleaned_bytes / self.seconds / 1e6


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def _reset_peak_rss(pid: int) -> bool:
    """Reset the process's VmHWM to its current resident set (Linux 4.0+); False if refused."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def _segments(partition_dir: Path) -> list[tuple[int, int]]:
    """(base offset, bytes) of every segment file of a partition, by base offset."""
    found = []
    for path in partition_dir.glob("*.log"):
        stem = path.name[: -len(".log")]
        if len(stem) == 20 and stem.isdigit():
            with contextlib.suppress(FileNotFoundError):  # deleted by a swap meanwhile
                found.append((int(stem), path.stat().st_size))
    return sorted(found)


class Target:
    """A broker to clean on: its bootstrap, process id, and where a topic's partition 0 and its
    cleaner checkpoint are on disk."""

    name: str
    bootstrap: str
    pid: int

    def partition_dir(self, topic: str) -> Path:
        raise NotImplementedError

    def checkpoint(self, topic: str) -> int | None:
        raise NotImplementedError

    def log_mark(self) -> int:
        """Where the broker's log ends now (for :meth:`own_mbps`)."""
        return 0

    def own_mbps(self, since: int, deadline: float) -> float | None:
        """The cleaner's own throughput figure logged after ``since``, if the broker logs one."""
        return None


class ReferenceTarget(Target):
    name = "reference"

    def __enter__(self) -> ReferenceTarget:
        self._broker = BrokerProcess(config={"log.cleaner.backoff.ms": CLEANER_BACKOFF_MS}).__enter__()
        self.bootstrap = self._broker.bootstrap
        assert self._broker.pid is not None
        self.pid = self._broker.pid
        return self

    def __exit__(self, *exc: object) -> None:
        self._broker.__exit__(None, None, None)

    def partition_dir(self, topic: str) -> Path:
        return self._broker.data_dir / f"{topic}-0"

    def checkpoint(self, topic: str) -> int | None:
        try:
            return int((self.partition_dir(topic) / CHECKPOINT_FILE).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None


class KafkaTarget(Target):
    name = "kafka"

    def __enter__(self) -> KafkaTarget:
        with contextlib.ExitStack() as stack:
            cluster = stack.enter_context(
                running_kafka(**{"log.cleaner.backoff.ms": CLEANER_BACKOFF_MS, "file.delete.delay.ms": 1000})
            )
            node = cluster.nodes[0]
            self.bootstrap = cluster.bootstrap
            assert node.pid is not None
            self.pid = node.pid
            self._logs = node.data_dir / "logs"
            self._server_log = node.log_path
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def partition_dir(self, topic: str) -> Path:
        return self._logs / f"{topic}-0"

    def checkpoint(self, topic: str) -> int | None:
        """From the log directory's checkpoint: a version line, a count, then "topic partition
        offset" lines."""
        try:
            lines = (self._logs / CHECKPOINT_FILE).read_text().splitlines()[2:]
        except FileNotFoundError:
            return None
        for line in lines:
            fields = line.split()
            if len(fields) == 3 and fields[0] == topic and fields[1] == "0":
                return int(fields[2])
        return None

    def log_mark(self) -> int:
        return self._server_log.stat().st_size if self._server_log.exists() else 0

    def own_mbps(self, since: int, deadline: float) -> float | None:
        """Kafka logs its statistics just after writing the checkpoint: wait for them a little."""
        while True:
            with open(self._server_log, "rb") as server_log:
                server_log.seek(since)
                found = KAFKA_STATS.findall(server_log.read().decode(errors="replace"))
            if found:
                mib = sum(float(size.replace(",", "")) for size, _ in found)
                seconds = sum(float(secs.replace(",", "")) for _, secs in found)
                return mib * 2**20 / 1e6 / seconds if seconds > 0 else None
            if time.monotonic() > deadline:
                return None
            time.sleep(POLL_S)


def _admin(bootstrap: str) -> ck.admin.AdminClient:
    return ck.admin.AdminClient({"bootstrap.servers": bootstrap})


def fill(bootstrap: str, topic: str, records: int, keys: int, value: bytes) -> None:
    """Produce ``records`` records, key ``i % keys`` for the i-th, all acknowledged."""
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    failures: list[ck.KafkaError] = []

    def on_delivery(err: ck.KafkaError | None, _msg: ck.Message) -> None:
        if err is not None:
            failures.append(err)

    width = len(str(keys))
    for i in range(records):
        key = b"key-%0*d" % (width, i % keys)
        while True:
            try:
                producer.produce(topic, value, key=key, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(600)
    if remaining or failures:
        raise RuntimeError(f"filling {topic} failed: {remaining} undelivered, errors {failures[:3]}")


def measure(target: Target, size: int, value_bytes: int, segment_bytes: int, timeout: float) -> Cleaned:
    """Fill a new compacted topic with ``size`` bytes, let the cleaner clean it, delete it."""
    topic = f"bench-clean-{uuid.uuid4().hex[:8]}"
    admin = _admin(target.bootstrap)
    configs = {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "1.0",
        "segment.bytes": str(segment_bytes),
    }
    admin.create_topics([ck.admin.NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    try:
        key_bytes = len(b"key-") + 7
        records = max(KEY_SHARE, size // (value_bytes + key_bytes + 10))  # ~10 bytes of record framing
        fill(target.bootstrap, topic, records, max(1, records // KEY_SHARE), os.urandom(value_bytes))
        return _clean(target, admin, topic, timeout)
    finally:
        admin.delete_topics([topic])[topic].result(60)


def _clean(target: Target, admin: ck.admin.AdminClient, topic: str, timeout: float) -> Cleaned:
    """Enable cleaning of ``topic`` and time the pass (see the module docstring)."""
    segments = _segments(target.partition_dir(topic))
    if len(segments) < 2:
        raise RuntimeError(f"{topic} has {len(segments)} segment(s): nothing to clean; use smaller segments")
    active_base = segments[-1][0]
    cleaned_bytes = sum(size for _, size in segments[:-1])
    log_mark = target.log_mark()
    rss_before = _status_kib(target.pid, "VmRSS") * 1024
    hwm_reset = _reset_peak_rss(target.pid)
    peak = rss_before
    resource = ck.admin.ConfigResource(
        ck.admin.ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ck.admin.ConfigEntry(
                "min.cleanable.dirty.ratio", "0.01", incremental_operation=ck.admin.AlterConfigOpType.SET
            )
        ],
    )
    start = time.perf_counter()
    admin.incremental_alter_configs([resource])[resource].result(30)
    deadline = time.monotonic() + timeout
    while (target.checkpoint(topic) or -1) < active_base:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{target.name}: {topic} not cleaned within {timeout:.0f} s")
        peak = max(peak, _status_kib(target.pid, "VmRSS") * 1024)
        time.sleep(POLL_S)
    seconds = time.perf_counter() - start
    if hwm_reset:
        peak = max(peak, _status_kib(target.pid, "VmHWM") * 1024)
    after_bytes = sum(size for base, size in _segments(target.partition_dir(topic)) if base < active_base)
    own = target.own_mbps(log_mark, time.monotonic() + 5)
    return Cleaned(cleaned_bytes, after_bytes, seconds, peak, rss_before, own)


def chosen_brokers(parser: argparse.ArgumentParser, brokers: str | None) -> list[str]:
    """The brokers ``--brokers`` names (an error for an unknown one), or both; Kafka left out,
    with the reason on stderr, when it cannot run here."""
    names = list(BROKERS) if brokers is None else [n.strip() for n in brokers.split(",") if n.strip()]
    if not names or set(names) - set(BROKERS):
        parser.error(f"--brokers takes some of {', '.join(BROKERS)}, not {brokers!r}")
    if "kafka" in names and (reason := unavailable_reason()) is not None:
        print(f"Apache Kafka skipped: {reason}", file=sys.stderr)
        names.remove("kafka")
    if not names:
        parser.error("no broker left to measure")
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def started(names: list[str]) -> Iterator[list[Target]]:
    """Every named broker, up for the whole measurement and stopped afterwards."""
    with contextlib.ExitStack() as stack:
        targets: list[Target] = []
        for name in names:
            target = ReferenceTarget() if name == "reference" else KafkaTarget()
            targets.append(stack.enter_context(target))
        yield targets


def print_table(results: dict[str, list[Cleaned]], runs: int) -> None:
    """A row per broker (medians over the runs), then the paired ratios reference/Kafka."""
    mib = 1e6
    print(
        f"{'broker':>10} {'cleaned MB':>10} {'after MB':>9} {'seconds':>8} {'MB/s':>8}"
        f" {spread_name(runs):>13} {'peak RSS MB':>11} {'RSS before MB':>13} {'own MB/s':>8}"
    )
    for name, cleaned in results.items():
        rates = [c.mbps for c in cleaned]
        low, high = spread(rates)
        own = [c.own_mbps for c in cleaned if c.own_mbps is not None]
        own_shown = f"{statistics.median(own):8.1f}" if own else f"{'-':>8}"
        print(
            f"{name:>10} {statistics.median(c.cleaned_bytes for c in cleaned) / mib:10.1f}"
            f" {statistics.median(c.after_bytes for c in cleaned) / mib:9.2f}"
            f" {statistics.median(c.seconds for c in cleaned):8.2f} {statistics.median(rates):8.1f}"
            f" {f'{low:.1f}-{high:.1f}':>13}"
            f" {statistics.median(c.peak_rss for c in cleaned) / mib:11.1f}"
            f" {statistics.median(c.rss_before for c in cleaned) / mib:13.1f} {own_shown}"
        )
    if "reference" in results and "kafka" in results:
        ours, kafka = results["reference"], results["kafka"]
        speed = [o.mbps / k.mbps for o, k in zip(ours, kafka, strict=True)]
        memory = [o.peak_rss / k.peak_rss for o, k in zip(ours, kafka, strict=True)]
        low, high = spread(speed)
        print(
            f"reference/kafka: MB/s {statistics.median(speed):.2f} ({spread_name(runs)} {low:.2f}-{high:.2f},"
            f" per run), peak RSS {statistics.median(memory):.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1GB"), help="log size (1GB, 256MB...)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--value-bytes", type=int, default=512)
    parser.add_argument("--segment-bytes", type=parse_size, default=None)
    parser.add_argument(
        "--warm-up",
        type=parse_size,
        default=parse_size("64MB"),
        help="an untimed log cleaned first (0: none)",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="longest a pass may take (s)")
    parser.add_argument("--brokers", default=None, help=f"comma-separated, of {', '.join(BROKERS)}")
    args = parser.parse_args()
    if args.runs < 1 or args.value_bytes < 1:
        parser.error("--runs and --value-bytes must be at least 1")
    segment_bytes = args.segment_bytes or default_segment_bytes(args.size)
    if segment_bytes < SEGMENT_BYTES_MIN:
        parser.error(f"--segment-bytes must be at least {SEGMENT_BYTES_MIN} (Kafka 4's floor)")
    if args.size < 2 * segment_bytes:
        parser.error(f"--size must hold at least two segments of {segment_bytes} bytes")
    names = chosen_brokers(parser, args.brokers)
    print(
        f"{args.size:,} bytes of {args.value_bytes}-byte values, 1 key in {KEY_SHARE} distinct,"
        f" {segment_bytes:,}-byte segments; median of {args.runs}"
    )
    results: dict[str, list[Cleaned]] = {name: [] for name in names}
    with started(names) as targets:
        if args.warm_up:  # untimed: Kafka's JVM compiles the cleaner's hot paths as it runs
            warm_segments = default_segment_bytes(args.warm_up)
            for target in targets:
                measure(
                    target,
                    max(args.warm_up, 2 * warm_segments),
                    args.value_bytes,
                    warm_segments,
                    args.timeout,
                )
        for run in range(args.runs):
            for target in targets if run % 2 == 0 else reversed(targets):
                cleaned = measure(target, args.size, args.value_bytes, segment_bytes, args.timeout)
                results[target.name].append(cleaned)
                print(
                    f"  run {run + 1} {target.name}: {cleaned.cleaned_bytes / 1e6:.1f} MB in"
                    f" {cleaned.seconds:.2f} s, peak RSS {cleaned.peak_rss / 1e6:.1f} MB",
                    file=sys.stderr,
                )
    print_table(results, args.runs)


if __name__ == "__main__":
    main()
