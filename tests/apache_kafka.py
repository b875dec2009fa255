"""Apache Kafka itself, as a test oracle: KRaft nodes started from Kafka's jars on Maven Central.

Where the reference broker and Kafka disagree, Kafka is right, and the SDK is only proven for the
users who run it against Kafka once it has been run against Kafka. This module fetches a pinned
Kafka release with Maven (``dependency:copy-dependencies`` of ``kafka_2.13`` and ``kafka-tools``;
the jars are cached per version, by default in ``~/.cache/topicwright/``), formats each node's
storage with Kafka's ``StorageTool`` and runs ``kafka.Kafka`` as a process of its own, every node
both broker and controller, on free loopback ports.

Invariants:
* every JVM started here is stopped by its PID (SIGTERM, then SIGKILL), also at interpreter exit;
* a node's data directory survives ``kill()``/``stop()`` so ``start()`` again is a restart;
* ``start()`` returns once the node answers Metadata with every node of its cluster registered.

Tests that use it are marked ``apache_kafka`` (``pytest -m apache_kafka`` runs them alone). On a
machine without Java or Maven they are skipped with a message that says what to install; under
``CI`` they fail instead, so a CI run cannot pass over them silently.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sdk.protocol import messages
from sdk.protocol.codec import decode_response, encode_request

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
# Kafka 4 logs through SLF4J 1.7; this binding sends it to log4j2, configured per node below.
_LOG4J_VERSION = "2.24.3"
CACHE_ROOT = Path(os.environ.get("TOPICWRIGHT_KAFKA_CACHE", Path.home() / ".cache" / "topicwright"))
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
INSTALL_HINT = (
    "Apache Kafka tests need Java 17+ and Maven on PATH, and Maven Central reachable "
    "(Debian: apt-get install openjdk-17-jre-headless maven); run them alone with "
    "`python -m pytest -m apache_kafka`"
)

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>topicwright.tests</groupId>
  <artifactId>apache-kafka-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_{scala}</artifactId><version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka-request.name = kafka.request.logger
logger.kafka-request.level = WARN
"""


class KafkaUnavailable(RuntimeError):
    """Java or Maven is missing, or the jars could not be fetched: the message says which."""


def unavailable_reason() -> str | None:
    """Why Apache Kafka cannot run on this machine, or None when it can (jars may still be fetched)."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing and not _jar_dir().joinpath(".complete").exists():
        return f"{' and '.join(missing)} not found: {INSTALL_HINT}"
    if shutil.which("java") is None:
        return f"java not found: {INSTALL_HINT}"
    return None


def _jar_dir() -> Path:
    return CACHE_ROOT / f"apache-kafka-{SCALA_VERSION}-{KAFKA_VERSION}" / "libs"


def kafka_jars() -> Path:
    """The directory of Kafka's runtime jars, fetched with Maven the first time (cached, locked)."""
    libs = _jar_dir()
    done = libs / ".complete"
    if done.exists():
        return libs
    reason = unavailable_reason()
    if reason:
        raise KafkaUnavailable(reason)
    home = libs.parent
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download at a time across test processes
        if done.exists():
            return libs
        (home / "pom.xml").write_text(
            _POM.format(scala=SCALA_VERSION, kafka=KAFKA_VERSION, log4j=_LOG4J_VERSION)
        )
        shutil.rmtree(libs, ignore_errors=True)
        result = subprocess.run(
            [
                "mvn", "-q", "-B", "-f", str(home / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0 or not any(libs.glob(f"kafka_{SCALA_VERSION}-*.jar")):
            raise KafkaUnavailable(
                f"mvn could not fetch Apache Kafka {KAFKA_VERSION}: "
                f"{(result.stdout + result.stderr)[-2000:]}\n{INSTALL_HINT}"
            )
        done.write_text(KAFKA_VERSION)
    return libs


def require_apache_kafka() -> None:
    """Skip the calling test (fail it under ``CI``) when Apache Kafka cannot run here; else fetch."""
    import pytest

    try:
        kafka_jars()
    except KafkaUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))


def wait_all_ready(nodes: list[KafkaNode], timeout: float) -> None:
    """Until every node in ``nodes`` is ready (``KafkaNode.ready``). A node whose JVM exits raises
    at once, whichever node is awaited: the one that lost a port at bind (``Address already in
    use``) exits, while its peers wait for a quorum it never joins."""
    deadline = time.monotonic() + timeout
    pending = list(nodes)
    last_error: BaseException | None = None
    while pending:
        for node in list(pending):
            try:
                if node.ready():
                    pending.remove(node)
            except OSError as exc:
                last_error = exc
        if not pending:
            return
        if time.monotonic() > deadline:
            node = pending[0]
            raise TimeoutError(
                f"Kafka node {node.node_id} not ready after {timeout:.0f} s ({last_error}):\n{node.tail()}"
            )
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's ``Uuid``).

    Like Kafka's ``Uuid.randomUuid`` it never starts with ``-``: ``kafka-storage format -t -x...``
    would read such an id as an option and fail.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def java_command(main_class: str, *args: str, jvm_options: Sequence[str] = ()) -> list[str]:
    """The command line that runs ``main_class`` from Kafka's jars (the classpath is the one
    element after ``-cp``, for a caller that puts classes of its own in front)."""
    return ["java", *jvm_options, "-cp", str(kafka_jars() / "*"), main_class, *args]


#: Every JVM started from Kafka's jars and not yet reaped, by PID: killed at interpreter exit.
_RUNNING: dict[int, subprocess.Popen[bytes]] = {}


@atexit.register
def _stop_leftovers() -> None:
    for process in list(_RUNNING.values()):
        with contextlib.suppress(ProcessLookupError):
            process.kill()


class KafkaNode:
    """One KRaft node (broker and controller) of a cluster, as a JVM process of its own."""

    def __init__(
        self,
        node_id: int,
        data_dir: Path,
        port: int,
        controller_port: int,
        voters: str,
        cluster_id: str,
        cluster_size: int,
        properties: Mapping[str, Any],
        features: Mapping[str, int] | None = None,
        client_compiler: bool = False,
    ) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.port = port
        self.controller_port = controller_port
        self._voters = voters
        self._cluster_id = cluster_id
        self._cluster_size = cluster_size
        self._properties = dict(properties)
        #: Feature levels the storage is formatted with (``StorageTool format --feature``), e.g.
        #: ``{"transaction.version": 1}``: finalized features cannot be set by a broker property.
        self._features = dict(features or {})
        #: Run the broker with the client compiler only (see ``_jvm_options``).
        self.client_compiler = client_compiler
        #: More ``StorageTool format`` arguments (e.g. ``--add-scram``), set before the first start.
        self.format_args: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._formatted = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def properties_path(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def server_properties(self) -> dict[str, str]:
        replication = min(3, self._cluster_size)
        settings: dict[str, Any] = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            **({"controller.quorum.voters": self._voters} if self._voters else {}),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min(2, replication),
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": min(2, replication),
            # Fewer internal partitions than Kafka's 50: each costs start-up time on 2 cores.
            "offsets.topic.num.partitions": 5,
            "transaction.state.log.num.partitions": 5,
            "group.initial.rebalance.delay.ms": 0,
        }
        settings.update(self._properties)
        return {key: str(value) for key, value in settings.items()}

    def _java(self, main_class: str, *args: str) -> list[str]:
        return java_command(main_class, *args, jvm_options=self._jvm_options(main_class))

    def _jvm_options(self, main_class: str = "kafka.Kafka") -> list[str]:
        """A one-shot tool (the storage format) runs with the client compiler only and the serial
        collector. So does the broker with ``client_compiler``: on 2 cores the server compiler's
        threads compete with the start-up itself, and no test runs a node long enough to need
        its code (a benchmark does: it leaves it off, for Kafka at full speed)."""
        broker = main_class == "kafka.Kafka"
        quick = ["-XX:TieredStopAtLevel=1"] if self.client_compiler or not broker else []
        return [
            "-Xms128m", "-Xmx768m", "-XX:+UseG1GC" if broker else "-XX:+UseSerialGC", *quick,
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
        ]

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.server_properties().items()]
        self.properties_path.write_text("\n".join(lines) + "\n")
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2.format(path=self.log_path))

    def format(self) -> None:
        """Format the node's storage (once; ``launch`` does it when it has not been done)."""
        if not self._formatted:
            self._format()

    def _format(self) -> None:
        self._write_config()
        result = subprocess.run(
            self._java(
                "kafka.tools.StorageTool", "format", "--ignore-formatted",
                "-t", self._cluster_id, "-c", str(self.properties_path),
                *(arg for name, level in self._features.items() for arg in ("--feature", f"{name}={level}")),
                *self.format_args,
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed: {result.stdout}{result.stderr}")
        self._formatted = True

    def launch(self) -> None:
        """Start the JVM without waiting for it to serve (a cluster starts its nodes together)."""
        if self.running:
            return
        if not self._formatted:
            self._format()
        else:
            self._write_config()
        stdout = open(self.data_dir / "stdout.log", "ab")  # noqa: SIM115 - owned by the process
        try:
            self._process = subprocess.Popen(
                self._java("kafka.Kafka", str(self.properties_path)),
                stdout=stdout,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            stdout.close()
        _RUNNING[self._process.pid] = self._process

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Return once this node answers Metadata listing every node of its cluster."""
        wait_all_ready([self], timeout)

    def ready(self) -> bool:
        """Whether the node answers Metadata listing every node of its cluster now; raises
        ``RuntimeError`` with its log's tail if its JVM exited, ``OSError`` while it does not answer."""
        if not self.running:
            raise RuntimeError(f"Kafka node {self.node_id} exited at start:\n{self.tail()}")
        return len(metadata_brokers(self.bootstrap)) >= self._cluster_size

    def start(self, timeout: float = START_TIMEOUT_S) -> KafkaNode:
        self.launch()
        self.wait_ready(timeout)
        return self

    def kill(self) -> None:
        """SIGKILL the JVM (a crash: nothing flushed, no controlled shutdown)."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            self._process.wait()
            _RUNNING.pop(self._process.pid, None)
            self._process = None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL after ``timeout``."""
        if self._process is None:
            return
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        _RUNNING.pop(self._process.pid, None)
        self._process = None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets open but answers nothing."""
        if self._process is not None:
            os.kill(self._process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            os.kill(self._process.pid, signal.SIGCONT)

    def restart(self, *, kill: bool = False, timeout: float = START_TIMEOUT_S) -> KafkaNode:
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start(timeout)

    def tail(self, lines: int = 40) -> str:
        text = ""
        for path in (self.data_dir / "stdout.log", self.log_path):
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def __repr__(self) -> str:
        return f"KafkaNode(id={self.node_id}, bootstrap={self.bootstrap!r}, pid={self.pid})"


class KafkaCluster:
    """``size`` KRaft nodes, each broker and controller, sharing one controller quorum: static
    (``controller.quorum.voters``), or with ``dynamic_quorum`` a KIP-853 quorum found through
    ``controller.quorum.bootstrap.servers`` whose node 1 is formatted ``--standalone`` (its only
    voter) and the others ``--no-initial-controllers`` (observers, until ``kafka-metadata-quorum
    add-controller`` adds them)."""

    def __init__(
        self, data_dir: Path, size: int = 1, *, features: Mapping[str, int] | None = None,
        client_compiler: bool = False, dynamic_quorum: bool = False, **properties: Any
    ) -> None:
        """``client_compiler``: the nodes run with the client compiler only (``KafkaNode``),
        quicker to start and restart; tests want it, benchmarks do not."""
        self._dynamic_quorum = dynamic_quorum
        if size < 1:
            raise ValueError("a Kafka cluster has at least one node")
        self._data_dir = data_dir
        self._size = size
        self._properties = properties
        self._features = features
        self._client_compiler = client_compiler
        self._started_once = False
        self.nodes = self._new_nodes()

    def _new_nodes(self) -> list[KafkaNode]:
        ports = [(free_port(), free_port()) for _ in range(self._size)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{ctl}" for i, (_, ctl) in enumerate(ports))
        properties = dict(self._properties)
        if self._dynamic_quorum:
            voters = ""
            properties["controller.quorum.bootstrap.servers"] = ",".join(
                f"127.0.0.1:{ctl}" for _, ctl in ports)
        cluster_id = new_cluster_id()
        nodes = [
            KafkaNode(
                i + 1, self._data_dir / f"node-{i + 1}", port, ctl, voters, cluster_id, self._size,
                properties, self._features, self._client_compiler,
            )
            for i, (port, ctl) in enumerate(ports)
        ]
        if self._dynamic_quorum:
            for node in nodes:
                node.format_args.append("--standalone" if node.node_id == 1 else "--no-initial-controllers")
        return nodes

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    def start(self, timeout: float = START_TIMEOUT_S) -> KafkaCluster:
        """Start every node. A first start that loses a port to another process between
        ``free_port`` and the JVM's bind starts again on fresh ports (up to three times)."""
        attempts = 1 if self._started_once else 3
        for attempt in range(attempts):
            try:
                # Each format is a JVM of its own: the nodes' run side by side.
                with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                    list(pool.map(KafkaNode.format, self.nodes))
                for node in self.nodes:
                    node.launch()  # a quorum needs its voters up together
                # All at once: a node that lost its port exits while the others wait for it.
                wait_all_ready(self.nodes, timeout)
            except (RuntimeError, TimeoutError) as exc:
                if attempt + 1 == attempts or "Address already in use" not in str(exc):
                    raise
                self.kill()
                for node in self.nodes:
                    shutil.rmtree(node.data_dir, ignore_errors=True)
                self.nodes = self._new_nodes()
                continue
            self._started_once = True
            return self
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def restart(self, *, kill: bool = False, timeout: float = START_TIMEOUT_S) -> KafkaCluster:
        for node in self.nodes:
            node.kill() if kill else node.stop()
        return self.start(timeout)

    def tool(self, main_class: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's command-line tools (``org.apache.kafka.tools.TopicCommand``, ...)."""
        node = self.nodes[0]
        return subprocess.run(
            node._java(main_class, *args), capture_output=True, text=True, timeout=timeout
        )

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def kafka_tool(main_class: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run a class from Kafka's jars (tools, test programs) against any broker, ours included."""
    command = java_command(main_class, *args, jvm_options=["-Xmx512m"])
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def metadata_brokers(bootstrap: str, timeout: float = 5.0) -> list[int]:
    """The node ids a broker's Metadata answer lists (raises OSError while it does not serve)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    request = messages.MetadataRequest(topics=[], allow_auto_topic_creation=False)
    payload = encode_request(request, 12, 1, "topicwright-tests")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        _, response = decode_response(messages.MetadataRequest.API_KEY, 12, _read_exactly(sock, size))
    return [broker.node_id for broker in response.brokers]


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        data += chunk
    return bytes(data)


@contextlib.contextmanager
def running_cluster(data_dir: Path, size: int = 1, **properties: Any) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(data_dir, size, **properties)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
