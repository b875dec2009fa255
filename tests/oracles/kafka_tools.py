"""Kafka's own programs (command-line tools, system-test clients) run from Kafka's jars.

The jars come from :func:`tests.apache_kafka.kafka_jars`. Every program runs as a JVM of its own
against any bootstrap string, ours or Apache Kafka's, so a test can put the same command to both.

Invariants:
* Kafka's log output goes to stderr at WARN (a log4j2 file written once per process), so stdout
  holds only what the program prints: tables for the tools, JSON event lines for the system-test
  clients (``VerifiableProducer``, ``VerifiableConsumer``, ``TransactionalMessageCopier``);
* every :class:`JavaProgram` is stopped by its PID (SIGTERM, then SIGKILL), also at interpreter exit;
* short-lived tools run with the client compiler only, the serial collector and a class-data
  sharing archive of Kafka's classes (dumped by the first tool run, kept beside the jars): a JVM
  start costs about a third of a plain one, and none of them runs long enough to need more. JVM
  logging is off, so a stale archive is silently ignored instead of printing to stdout.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests import apache_kafka
from tests.apache_kafka import _RUNNING, kafka_jars

_LOG4J2 = """status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""

_QUICK_JVM = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto", "-Xlog:disable"]

@functools.cache
def _log_config() -> Path:
    path = Path(tempfile.mkdtemp(prefix="kafka-tools-")) / "log4j2.properties"
    path.write_text(_LOG4J2)
    return path


def _class_archive() -> Path:
    return kafka_jars().parent / "tools-classes.jsa"


def java_command(main_class: str, *args: str, heap: str = "256m", quick: bool = True) -> list[str]:
    """The command line that runs ``main_class`` from Kafka's jars with ``args``."""
    options = [f"-Xmx{heap}"]
    if quick:
        archive = _class_archive()
        options += _QUICK_JVM
        options.append(f"-XX:SharedArchiveFile={archive}" if archive.exists() else "")
    options.append(f"-Dlog4j2.configurationFile={_log_config()}")
    return apache_kafka.java_command(main_class, *args, jvm_options=list(filter(None, options)))


def _with_archive_dump(command: list[str]) -> tuple[list[str], Path | None]:
    """The first tool run without an archive dumps one (under a lock: one process dumps it)."""
    archive = _class_archive()
    if archive.exists():
        return command, None
    lock = open(archive.with_suffix(".lock"), "w")  # noqa: SIM115 - held until the dump is renamed
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return command, None
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    _ARCHIVE_LOCKS[partial] = lock
    return [command[0], f"-XX:ArchiveClassesAtExit={partial}", *command[1:]], partial


_ARCHIVE_LOCKS: dict[Path, Any] = {}


def _archive_dumped(partial: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if partial.stat().st_size > 0:
            partial.rename(_class_archive())
    partial.unlink(missing_ok=True)
    _ARCHIVE_LOCKS.pop(partial).close()


def run_tool(
    main_class: str, *args: str, stdin: str | None = None, timeout: float = 90.0
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools to completion; stdout and stderr are captured as text."""
    command, dump = _with_archive_dump(java_command(main_class, *args))
    try:
        return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout)
    finally:
        if dump is not None:
            _archive_dumped(dump)


def write_properties(path: Path, settings: dict[str, Any]) -> Path:
    """A Java ``.properties`` file (booleans as ``true``/``false``) for ``--producer.config`` etc."""
    lines = []
    for key, value in settings.items():
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        lines.append(f"{key}={text}")
    path.write_text("\n".join(lines) + "\n")
    return path


class JavaProgram:
    """A long-running program from Kafka's jars whose stdout is one JSON event per line.

    stdout and stderr go to files in ``work_dir`` (``<name>.out``/``<name>.err``, appended across
    restarts, so the events of every run of one name stay in one file, in order).
    """

    def __init__(self, work_dir: Path, name: str, main_class: str, *args: str, heap: str = "256m"):
        self.name = name
        self.command = java_command(main_class, *args, heap=heap, quick=False)
        self.stdout_path = work_dir / f"{name}.out"
        self.stderr_path = work_dir / f"{name}.err"
        self._process: subprocess.Popen[bytes] | None = None
        self._run_offset = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def start(self) -> JavaProgram:
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self._run_offset = self.stdout_path.stat().st_size if self.stdout_path.exists() else 0
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self._process = subprocess.Popen(
                self.command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
            )
        _RUNNING[self._process.pid] = self._process
        return self

    def events(self, *, this_run: bool = False) -> list[dict[str, Any]]:
        """Every JSON object printed so far, by every run or by the latest one only (a line still
        being written is left for later)."""
        try:
            with open(self.stdout_path, "rb") as out:
                out.seek(self._run_offset if this_run else 0)
                printed = out.read().decode(errors="replace")
        except FileNotFoundError:
            return []
        found = []
        for line in printed.splitlines():
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    found.append(json.loads(line))
        return found

    def stderr(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed, no shutdown hook run."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        self._reap()

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (the program's shutdown hook runs), SIGKILL after ``timeout``; the exit code."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        """Wait for the program to exit; SIGKILL it and raise when it outlives ``timeout``."""
        assert self._process is not None, f"{self.name} was never started"
        try:
            code = self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"{self.name} still running after {timeout:.0f} s:\n{self.stderr()}") from None
        self._reap()
        return code

    def _reap(self) -> None:
        if self._process is not None:
            self._process.wait()
            _RUNNING.pop(self._process.pid, None)

    def __repr__(self) -> str:
        return f"JavaProgram({self.name!r}, pid={self.pid})"


def wait_until(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
    """Return once ``condition()`` holds; raise TimeoutError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


def stop_all(programs: list[JavaProgram]) -> None:
    """Kill every program still running (test teardown)."""
    for program in programs:
        program.kill()


def text(record: Message) -> str:
    """A record's value as text (these tests never write a null value)."""
    value = record.value()
    assert value is not None, f"null value at {record.topic()}-{record.partition()}@{record.offset()}"
    return value.decode()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` through confluent-kafka's admin client, raising on any error."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic].result(30)


def read_topic(
    bootstrap: str, topic: str, partitions: int, *, read_committed: bool = False, timeout: float = 60.0
) -> list[Message]:
    """Every record of ``topic`` from the beginning to each partition's end (its last stable offset
    under ``read_committed``), read with confluent-kafka by assignment, in partition order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "oracle-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[Message] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(records)} records of {topic}; partitions at end: {at_end}")
            for message in consumer.consume(1000, 0.5):
                error, partition = message.error(), message.partition()
                assert partition is not None
                if error is None:
                    records.append(message)
                    at_end.discard(partition)
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                else:
                    raise RuntimeError(f"reading {topic}: {error}")
    finally:
        consumer.close()
    return records
