"""An embedded Kafka for tests: the reference broker as a subprocess or in-process (public API).

Point any Kafka client (this SDK, confluent-kafka, aiokafka, kafka-python, kcat) at the broker's
``bootstrap`` address; nothing else is needed, no JVM, no ZooKeeper, no container.

* :class:`BrokerProcess`: ``python -m reference_broker`` in a child process. The form every suite
  should prefer: a real process can be SIGKILLed mid-write and restarted on the same data dir and
  port (``kill()``, ``restart(kill=True)``), which is what crash-recovery tests need, and a broker
  bug cannot corrupt the test's own interpreter. ``config`` takes Kafka's property names
  (``{"num.partitions": 3, "auto.create.topics.enable": False}``), over
  :data:`EMBEDDED_DEFAULTS` (fast group settings for tests); ``stderr()`` returns what the
  broker logged, for failure messages. A context manager::

      with BrokerProcess(config={"num.partitions": 3}) as broker:
          producer = Producer(bootstrap_servers=broker.bootstrap)

* :func:`run_in_process` / :class:`InProcessBroker`: a ``Broker`` on an event loop in a background
  thread of this process, for quick tests that want to look at broker internals
  (``runner.call(fn, *args)`` runs ``fn`` on the broker's loop).
* :class:`BrokerFactory`: makes ``BrokerProcess``es and stops them all with ``stop_all()``.
* :class:`ClusterProcess`: a replicated cluster of N combined-mode node processes (node N on
  127.0.1.N), each behind a proxy the test controls, that a test can break on purpose:
  ``kill(n)`` (SIGKILL), ``stop(n)``, ``pause(n)`` (SIGSTOP), ``resume(n)``, ``restart(n)``,
  ``isolate(n)``, ``cut(a, b)``, ``heal(n)``; ``leader_of(topic, partition)`` names a partition's
  leader. Clients connect to ``cluster.bootstrap`` (every node's address)::

      with ClusterProcess(3, config={"min.insync.replicas": 2}) as cluster:
          leader = cluster.leader_of("orders", 0)
          cluster.kill(leader)

* The pytest fixtures ``broker`` (one broker per session), ``broker_factory`` and
  ``reference_cluster`` (a factory of ``ClusterProcess``es) come from
  :mod:`reference_broker.pytest_plugin`, which installing the distribution registers as a pytest
  plugin; this module needs no pytest, so scripts and examples can use it too.

Everything started here is stopped and every temporary directory removed, even when a test fails
(and at interpreter exit for anything left running); ports are free loopback ports picked by the
OS (``--port 0``) and kept across restarts. Failing to start raises :class:`BrokerStartError` with
the broker's log.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reference_broker.__main__ import LISTENING_PREFIX
from reference_broker._event_loop import loop_factory
from reference_broker.config import BrokerConfig

if TYPE_CHECKING:
    from reference_broker.cluster.proxy import ClusterProxy, CutMode
    from sdk.protocol.messages import MetadataResponse

__all__ = [
    "EMBEDDED_DEFAULTS",
    "LISTENING_PREFIX",
    "BrokerFactory",
    "BrokerProcess",
    "BrokerStartError",
    "ClusterFactory",
    "ClusterNode",
    "ClusterProcess",
    "ClusterStartError",
    "InProcessBroker",
    "run_in_process",
    "wait_until",
]

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


# Every BrokerProcess with a live child, so an interpreter that exits without running fixture
# teardown (Ctrl-C, pytest -x, an exception in a script) still leaves no broker behind.
_LIVE: weakref.WeakSet[BrokerProcess] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(Exception):
            proc.stop()


#: What an embedded test broker runs with unless the test says otherwise: group settings short
#: enough for tests, as Kafka's own integration-test harnesses set them (a 1 s minimum session
#: timeout instead of 6 s, no initial rebalance delay instead of 3 s). A real deployment keeps
#: Kafka's defaults.
EMBEDDED_DEFAULTS: Mapping[str, Any] = {
    "group.min.session.timeout.ms": 1000,
    "group.initial.rebalance.delay.ms": 0,
    # KIP-939 two-phase commit is off by default in Kafka; tests and embedded use want it on.
    "transaction.two.phase.commit.enable": True,
}


class BrokerStartError(RuntimeError):
    """The broker process exited or stayed silent instead of printing its listening line."""


def _write_properties(path: Path, config: Mapping[str, Any]) -> None:
    lines = []
    for key, value in config.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        lines.append(f"{key}={value}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


class BrokerProcess:
    """``python -m reference_broker`` in a child process.

    ``data_dir=None`` makes a temporary directory that is removed by ``stop()``; a given data dir
    is left alone. ``restart()`` reuses the data dir and the port, so clients' bootstrap strings
    stay valid across a crash.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        config: Mapping[str, Any] | None = None,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        log_level: str = "INFO",
        event_loop: str = "auto",
        start_timeout: float = START_TIMEOUT_S,
    ):
        self._scratch = Path(tempfile.mkdtemp(prefix="reference-broker-"))
        self._own_data_dir = data_dir is None
        self.data_dir = self._scratch / "data" if data_dir is None else Path(data_dir)
        self.config = {**EMBEDDED_DEFAULTS, **(config or {})}
        self.host = host
        self.port = port
        self.log_level = log_level
        self.event_loop = event_loop
        self.start_timeout = start_timeout
        self.stderr_path = self._scratch / "stderr.log"
        self._stdout_path = self._scratch / "stdout.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._starts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stderr(self) -> str:
        """Everything the broker logged so far (all runs), for failure messages."""
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def start(self) -> BrokerProcess:
        self.launch()
        self._wait_listening()
        return self

    def launch(self) -> BrokerProcess:
        """Start the process without waiting for it to listen (``wait_listening()`` does), so
        several brokers can start at once."""
        if self.running:
            raise RuntimeError("broker already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "reference_broker",
            "--data-dir",
            str(self.data_dir),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--log-level",
            self.log_level,
            "--event-loop",
            self.event_loop,
        ]
        if self.config:
            props = self._scratch / "broker.properties"
            _write_properties(props, self.config)
            cmd += ["--config", str(props)]
        self._starts += 1
        with open(self._stdout_path, "wb") as out, open(self.stderr_path, "ab") as err:
            err.write(f"--- start #{self._starts}: {' '.join(cmd)}\n".encode())
            err.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)
        _LIVE.add(self)
        return self

    def wait_listening(self) -> BrokerProcess:
        """Until the launched broker prints its listening line (``BrokerStartError`` if it exits
        or stays silent for ``start_timeout``)."""
        self._wait_listening()
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        assert self._proc is not None
        while time.monotonic() < deadline:
            text = self._stdout_path.read_text(encoding="utf-8", errors="replace")
            for line in text.splitlines():
                if line.startswith(LISTENING_PREFIX):
                    _, _, port = line[len(LISTENING_PREFIX) :].strip().rpartition(":")
                    self.port = int(port)
                    return
            if self._proc.poll() is not None:
                raise BrokerStartError(
                    f"broker exited with code {self._proc.returncode} before listening:\n{self.stderr()}"
                )
            time.sleep(0.02)
        self.kill()
        raise BrokerStartError(
            f"broker did not print its listening line in {self.start_timeout}s:\n{self.stderr()}"
        )

    def kill(self) -> None:
        """SIGKILL: no flush, no clean close; what recovery must cope with."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait for the clean shutdown; SIGKILL if it hangs. Returns the exit code."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        return self._proc.returncode

    def restart(self, *, kill: bool = False) -> BrokerProcess:
        """Stop (cleanly, or with SIGKILL) and start again on the same data dir and port."""
        self.kill() if kill else self.terminate()
        return self.start()

    def stop(self) -> None:
        """Terminate and remove everything temporary. Safe to call twice."""
        try:
            self.terminate()
        finally:
            _LIVE.discard(self)
            if self._own_data_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> BrokerProcess:
        if not self.running:
            try:
                self.start()
            except BaseException:
                self.stop()
                raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"BrokerProcess({self.bootstrap}, data_dir={self.data_dir}, pid={self.pid})"


class InProcessBroker:
    """A ``Broker`` on its own event loop in a background thread (see ``run_in_process``)."""

    def __init__(self, config: BrokerConfig):
        self.config = config
        self.broker: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="reference-broker", daemon=True)

    def _run(self) -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory(self.config.event_loop)) as runner:
                runner.run(self._main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        from reference_broker.broker import Broker

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with Broker(self.config) as broker:
            self.broker = broker
            self._ready.set()
            await self._stop.wait()

    @property
    def host(self) -> str:
        return str(self.broker.host)

    @property
    def port(self) -> int:
        return int(self.broker.port)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> InProcessBroker:
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise BrokerStartError("in-process broker did not start")
        if self._error is not None:
            raise BrokerStartError(f"in-process broker failed: {self._error!r}") from self._error
        return self

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` (sync or coroutine function) on the broker's loop and return its result."""

        async def invoke() -> Any:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(STOP_TIMEOUT_S)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_TIMEOUT_S)

    def __enter__(self) -> InProcessBroker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def run_in_process(
    data_dir: str | Path | None = None,
    config: Mapping[str, Any] | None = None,
    port: int = 0,
    host: str = "127.0.0.1",
    event_loop: str = "auto",
) -> Iterator[InProcessBroker]:
    """A broker serving from a background thread of this process, stopped on exit."""
    scratch = None
    if data_dir is None:
        scratch = tempfile.mkdtemp(prefix="reference-broker-")
        data_dir = scratch
    try:
        cfg = BrokerConfig.build(
            data_dir,
            host=host,
            port=port,
            properties={**EMBEDDED_DEFAULTS, **(config or {})},
            event_loop=event_loop,
        )
        runner = InProcessBroker(cfg).start()
        try:
            yield runner
        finally:
            runner.stop()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


class BrokerFactory:
    """Makes fresh ``BrokerProcess``es and stops them all at the end (the ``broker_factory`` fixture)."""

    def __init__(self) -> None:
        self.brokers: list[BrokerProcess] = []

    def __call__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        data_dir: str | Path | None = None,
        port: int = 0,
        start: bool = True,
        **kwargs: Any,
    ) -> BrokerProcess:
        broker = BrokerProcess(data_dir=data_dir, config=config, port=port, **kwargs)
        self.brokers.append(broker)
        if start:
            broker.start()
        return broker

    def stop_all(self) -> None:
        errors = []
        for broker in self.brokers:
            try:
                broker.stop()
            except Exception as exc:  # keep stopping the rest
                errors.append(exc)
        self.brokers.clear()
        if errors:
            raise errors[0]


# -- a replicated cluster ------------------------------------------------------------------------

CLUSTER_START_TIMEOUT_S = 60.0
CLUSTER_STOP_TIMEOUT_S = 10.0
_METADATA_VERSION = 12
_FRAME = struct.Struct(">i")


class ClusterStartError(BrokerStartError):
    """A cluster node did not start, or the brokers did not all register in time."""


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``condition`` until it returns something true (returned); ``OSError``s count as not
    yet (a node starting or stopping). Raises ``TimeoutError`` naming ``what`` after ``timeout``
    seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting until {what}")
        time.sleep(0.1)


@dataclass(eq=False)
class ClusterNode:
    """One node of a :class:`ClusterProcess`: its process and the address clients and the other
    nodes reach it at (the proxy's, when there is one)."""

    node_id: int
    host: str
    process: BrokerProcess
    port: int
    controller_port: int
    paused: bool = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.running

    @property
    def log_path(self) -> Path:
        return self.process.stderr_path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.process.stderr().splitlines()[-lines:])


def _free_pair(host: str) -> tuple[int, int]:
    """Two distinct free ports on ``host`` (a client and a controller listener's)."""
    with socket.socket() as first, socket.socket() as second:
        first.bind((host, 0))
        second.bind((host, 0))
        return int(first.getsockname()[1]), int(second.getsockname()[1])


def _free_port_except(host: str, taken: set[int]) -> int:
    """A free port on ``host`` that is none of ``taken`` (ports chosen for other listeners)."""
    while True:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port


def request_metadata(
    bootstrap: str, topics: list[str] | None = None, timeout: float = 5.0
) -> MetadataResponse:
    """One Metadata request to ``host:port`` on a fresh blocking connection (no client library:
    the harness answers questions about the cluster even while clients misbehave). Raises
    ``OSError`` when the node does not answer."""
    from sdk.protocol.codec import decode_response, encode_request
    from sdk.protocol.messages import MetadataRequest, MetadataResponse

    host, _, port = bootstrap.rpartition(":")
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
    )
    payload = encode_request(request, _METADATA_VERSION, 1, "reference-cluster-harness")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(_FRAME.pack(len(payload)) + payload)
        size = _FRAME.unpack(_recv_exactly(sock, _FRAME.size))[0]
        _, response = decode_response(MetadataRequest.API_KEY, _METADATA_VERSION, _recv_exactly(sock, size))
    assert isinstance(response, MetadataResponse)
    return response


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionResetError("the node closed the connection")
        chunks += chunk
    return bytes(chunks)


class ClusterProcess:
    """``nodes`` combined-mode (broker and controller) node processes sharing one cluster id.

    Node N listens on ``127.0.1.N``; with ``proxy=True`` (the default) each of its listeners sits
    behind :class:`~reference_broker.cluster.proxy.ClusterProxy`, which runs in this process, so
    ``isolate``/``cut``/``heal`` work and survive a node's kill, pause or restart. ``config``
    (Kafka's property names) applies to every node, over :data:`EMBEDDED_DEFAULTS` and the local
    cluster defaults (fast heartbeats and session timeout). ``data_dir=None`` uses a temporary
    directory removed by ``close()``; node N keeps its data in ``data_dir/node-N``. Ports are free
    loopback ports (or ``base_port + N - 1`` for clients and ``base_port + 100 + N - 1`` for
    controllers) and stay the same across restarts. ``extra_listeners`` (name -> security
    protocol) gives every node more listeners on free ports (behind the proxy too), e.g. an
    ``INTERNAL`` SASL_SSL listener that ``config``'s ``inter.broker.listener.name`` names.

    ``start()`` returns once every broker is registered and unfenced; ``close()`` stops every node
    by its PID (SIGCONT first for a paused one, SIGTERM, SIGKILL after a deadline). A context
    manager, and everything it started is also stopped at interpreter exit.
    """

    def __init__(
        self,
        nodes: int = 3,
        config: Mapping[str, Any] | None = None,
        *,
        data_dir: str | Path | None = None,
        proxy: bool = True,
        base_port: int | None = None,
        log_level: str = "INFO",
        start_timeout: float = CLUSTER_START_TIMEOUT_S,
        cluster_id: str | None = None,
        extra_listeners: Mapping[str, str] | None = None,
        quorum: str = "static",
    ) -> None:
        from reference_broker.cluster.launcher import (
            QUORUM_MODES,
            bootstrap_servers_setting,
            node_host,
            stored_cluster_id,
            voters_setting,
        )
        from reference_broker.config import new_cluster_id

        if not 1 <= nodes <= 254:
            raise ValueError(f"a loopback cluster has between 1 and 254 nodes, not {nodes}")
        if quorum not in QUORUM_MODES:
            raise ValueError(f"quorum {quorum!r} is not one of {', '.join(QUORUM_MODES)}")
        self.quorum = quorum
        self._scratch = Path(tempfile.mkdtemp(prefix="reference-cluster-")) if data_dir is None else None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(str(self._scratch)) / "data"
        self.cluster_id = cluster_id or stored_cluster_id(self.data_dir) or new_cluster_id()
        self.config = dict(config or {})
        self.start_timeout = start_timeout
        self.proxy: ClusterProxy | None = None
        self.nodes: list[ClusterNode] = []
        #: node id -> listener name -> (security protocol, bound port, advertised port)
        self._extra_listeners: dict[int, dict[str, tuple[str, int, int]]] = {}
        ids = list(range(1, nodes + 1))
        hosts = {n: node_host(n) for n in ids}
        try:
            if proxy:
                from reference_broker.cluster.proxy import ClusterProxy

                self.proxy = ClusterProxy({host: n for n, host in hosts.items()}).start()
            bound: dict[int, tuple[int, int]] = {}
            advertised: dict[int, tuple[int, int]] = {}
            for n in ids:
                wanted = (0, 0) if base_port is None else (base_port + n - 1, base_port + 100 + n - 1)
                if self.proxy is None:
                    bound[n] = advertised[n] = wanted if base_port is not None else _free_pair(hosts[n])
                    continue
                client = self.proxy.add_route(n, "PLAINTEXT", hosts[n], wanted[0], hosts[n], 0)
                controller = self.proxy.add_route(n, "CONTROLLER", hosts[n], wanted[1], hosts[n], 0)
                advertised[n] = (client.listen_port, controller.listen_port)
            if self.proxy is not None:  # the proxy's ports are taken: the real ones differ from them
                for n in ids:
                    bound[n] = _free_pair(hosts[n])
                    self.proxy.set_target(n, "PLAINTEXT", hosts[n], bound[n][0])
                    self.proxy.set_target(n, "CONTROLLER", hosts[n], bound[n][1])
            for n in ids:
                self._extra_listeners[n] = {}
                for name, protocol in (extra_listeners or {}).items():
                    front = 0
                    if self.proxy is not None:
                        front = self.proxy.add_route(n, name, hosts[n], 0, hosts[n], 0).listen_port
                    taken = {*bound[n], front, *(e[1] for e in self._extra_listeners[n].values())}
                    port = _free_port_except(hosts[n], taken)
                    if self.proxy is not None:
                        self.proxy.set_target(n, name, hosts[n], port)
                    self._extra_listeners[n][name] = (protocol, port, front or port)
            controllers = {n: advertised[n][1] for n in ids}
            voters = voters_setting(controllers)
            self._bootstrap_servers = (None if quorum == "static"
                                       else bootstrap_servers_setting(controllers))
            for n in ids:
                self.nodes.append(self._make_node(n, hosts[n], bound[n], advertised[n], voters, log_level))
            if quorum != "static":
                self._format_dynamic(controllers)
        except BaseException:
            self.close()
            raise
        _LIVE_CLUSTERS.add(self)

    def _format_dynamic(self, controllers: Mapping[int, int]) -> None:
        """Format the nodes' storage as ``kafka-storage format`` does for a dynamic quorum: node
        1 ``--standalone`` and the others ``--no-initial-controllers``, or every node an
        initial controller. A node formatted by an earlier run keeps its storage."""
        import uuid

        from reference_broker.cluster.launcher import node_host
        from reference_broker.cluster.quorum_format import format_node, stored_directory_id

        ids = sorted(controllers)
        voters = ids[:1] if self.quorum == "standalone" else ids
        initial = {n: (stored_directory_id(self.data_dir / f"node-{n}") or uuid.uuid4(),
                       node_host(n), controllers[n]) for n in voters}
        for n in ids:
            format_node(self.data_dir / f"node-{n}", n, self.cluster_id,
                        initial_controllers=initial if n in voters else None)

    def directory_id(self, node_id: int) -> Any:
        """Node ``node_id``'s ``directory.id`` (a dynamic quorum's replica directory id)."""
        from reference_broker.cluster.quorum_format import stored_directory_id

        return stored_directory_id(self.data_dir / f"node-{node_id}")

    def _make_node(self, node_id: int, host: str, bound: tuple[int, int], advertised: tuple[int, int],
                   voters: str, log_level: str) -> ClusterNode:
        from reference_broker.cluster.launcher import node_config

        config = node_config(
            node_id,
            cluster_id=self.cluster_id,
            voters=voters,
            client_port=bound[0],
            controller_port=bound[1],
            advertised_client_port=advertised[0],
            advertised_controller_port=advertised[1],
            extra=self.config,
            extra_listeners=self._extra_listeners.get(node_id),
            bootstrap_servers=self._bootstrap_servers,
        )
        process = BrokerProcess(self.data_dir / f"node-{node_id}", config, bound[0], host=host,
                                log_level=log_level, start_timeout=self.start_timeout)
        process.stderr_path = self.data_dir / f"node-{node_id}.log"
        return ClusterNode(node_id, host, process, advertised[0], advertised[1])

    # -- addresses and state ---------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every node's client address, comma-separated: what clients take as bootstrap servers."""
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> ClusterNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node {node_id}; nodes are {[n.node_id for n in self.nodes]}")

    def metadata(self, topics: list[str] | None = None, *, via: int | None = None) -> MetadataResponse:
        """Metadata from node ``via``, or from the first node that answers (paused and cut nodes
        do not). Raises ``OSError`` if none answers."""
        candidates = [self.node(via)] if via is not None else self.nodes
        error: OSError | None = None
        for node in candidates:
            if not node.running or node.paused or self._clients_cut(node.node_id):
                continue
            try:
                return request_metadata(node.bootstrap, topics, timeout=2.0)
            except OSError as exc:
                error = exc
        raise error or ConnectionError("no node of the cluster can answer")

    def _clients_cut(self, node_id: int) -> bool:
        from reference_broker.cluster.proxy import CLIENTS

        return self.proxy is not None and (CLIENTS, node_id) in self.proxy.cuts

    def wait_for(self, condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        """:func:`wait_until` (kept as a method for tests holding only the cluster)."""
        return wait_until(condition, what, timeout)

    def partition(self, topic: str, partition: int, *, via: int | None = None) -> Any:
        """``topic``/``partition`` as Metadata describes it now (``leader_id``, ``isr_nodes``,
        ``replica_nodes``, ``leader_epoch``), or None while the topic or partition is unknown."""
        for found in self.metadata([topic], via=via).topics:
            if found.name == topic and found.error_code == 0:
                for part in found.partitions:
                    if part.partition_index == partition:
                        return part
        return None

    def leader_of(self, topic: str, partition: int, timeout: float = 30.0) -> int:
        """The node id leading ``topic``/``partition`` (waits while it has none, up to ``timeout``)."""

        def leader() -> int | None:
            part = self.partition(topic, partition)
            if part is None or part.leader_id < 0:
                return None
            return int(part.leader_id)

        return int(self.wait_for(leader, f"{topic}-{partition} has a leader", timeout))

    def registered_brokers(self, *, via: int) -> set[int]:
        """The broker ids node ``via``'s Metadata lists (registered and unfenced ones)."""
        return {b.node_id for b in self.metadata(via=via).brokers}

    def wait_until_registered(self, timeout: float | None = None, *,
                              interrupted: threading.Event | None = None) -> None:
        """Until every running node's Metadata lists every running node as a broker. A node
        process that exits meanwhile raises :class:`ClusterStartError` with its log."""
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        while interrupted is None or not interrupted.is_set():
            live = [n for n in self.nodes if n.running and not n.paused]
            expected = {n.node_id for n in live}
            ready = True
            for node in live:
                try:
                    ready = ready and self.registered_brokers(via=node.node_id) == expected
                except OSError:
                    ready = False
            if ready:
                return
            for node in self.nodes:
                if node.process._proc is not None and not node.running and not node.paused:
                    raise ClusterStartError(
                        f"node {node.node_id} exited with code {node.process._proc.returncode}:"
                        f"\n{node.log_tail()}"
                    )
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- node {n.node_id}:\n{n.log_tail(15)}" for n in self.nodes)
                raise ClusterStartError(f"the brokers did not all register within the timeout\n{tails}")
            time.sleep(0.1)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, *, interrupted: threading.Event | None = None) -> ClusterProcess:
        """Start every node (each waits until it listens), then wait until all are registered."""
        try:
            for node in self.nodes:  # all at once: the quorum needs its voters up together
                node.process.launch()
            for node in self.nodes:
                if interrupted is not None and interrupted.is_set():
                    return self
                try:
                    node.process.wait_listening()
                except BrokerStartError as exc:
                    raise ClusterStartError(f"node {node.node_id}: {exc}") from None
            self.wait_until_registered(interrupted=interrupted)
        except BaseException:
            self.close()
            raise
        return self

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (a paused node too): no flush, no controlled shutdown."""
        node = self.node(node_id)
        node.process.kill()
        node.paused = False

    def stop(self, node_id: int, timeout: float = CLUSTER_STOP_TIMEOUT_S) -> int | None:
        """SIGTERM node ``node_id`` and wait for its clean shutdown (SIGKILL after ``timeout``)."""
        node = self.node(node_id)
        self.resume(node_id)
        return node.process.terminate(timeout)

    def pause(self, node_id: int) -> None:
        """SIGSTOP node ``node_id``: its sockets stay open but it answers nothing (a GC pause,
        a frozen VM), until :meth:`resume`."""
        node = self.node(node_id)
        if node.pid is None or not node.running:
            raise RuntimeError(f"node {node_id} is not running")
        os.kill(node.pid, signal.SIGSTOP)
        node.paused = True

    def resume(self, node_id: int) -> None:
        """SIGCONT a paused node (nothing happens to a running one)."""
        node = self.node(node_id)
        if node.paused and node.pid is not None and node.running:
            os.kill(node.pid, signal.SIGCONT)
        node.paused = False

    def restart(self, node_id: int, *, kill: bool = False, wait_registered: bool = False) -> ClusterNode:
        """Stop node ``node_id`` (SIGTERM, or SIGKILL with ``kill=True``) and start it again on
        its data and ports; returns once it listens (and, with ``wait_registered``, once every
        broker is registered again)."""
        node = self.node(node_id)
        self.kill(node_id) if kill else self.stop(node_id)
        node.process.start()
        if wait_registered:
            self.wait_until_registered()
        return node

    def start_node(self, node_id: int) -> ClusterNode:
        """Start a killed or stopped node again (returns once it listens)."""
        node = self.node(node_id)
        if not node.running:
            node.process.start()
        return node

    def _require_proxy(self) -> ClusterProxy:
        if self.proxy is None:
            raise RuntimeError("this cluster runs without the proxy (proxy=False): links cannot be cut")
        return self.proxy

    def isolate(self, node_id: int, *, mode: CutMode | None = None) -> None:
        """Cut node ``node_id`` from every other node and from clients (both ways) until healed.
        ``mode``: the proxy's ``CutMode`` (connections reset, the default, or black-holed)."""
        from reference_broker.cluster.proxy import CutMode

        self._require_proxy().isolate(node_id, mode=mode or CutMode.RESET)

    def cut(self, a: int, b: int, *, both_ways: bool = True, mode: CutMode | None = None) -> None:
        """Cut the link between nodes ``a`` and ``b`` (only ``a``'s connections to ``b`` when
        ``both_ways`` is false)."""
        from reference_broker.cluster.proxy import CutMode

        self._require_proxy().cut(a, b, both_ways=both_ways, mode=mode or CutMode.RESET)

    def heal(self, node_id: int | None = None) -> None:
        """Restore every cut link of node ``node_id`` (every cut of the cluster when None)."""
        self._require_proxy().heal(node_id)

    def close(self, timeout: float = CLUSTER_STOP_TIMEOUT_S) -> None:
        """Stop every node by its PID: SIGCONT the paused, SIGTERM all at once, SIGKILL whatever
        still runs after ``timeout``; then the proxy, then the temporary data. Safe to call twice."""
        try:
            for node in self.nodes:
                self.resume(node.node_id)
                if node.running and node.pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(node.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for node in self.nodes:
                node.process.terminate(max(0.1, deadline - time.monotonic()))
                node.process.stop()
        finally:
            if self.proxy is not None:
                self.proxy.close()
            _LIVE_CLUSTERS.discard(self)
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> ClusterProcess:
        if not any(node.running for node in self.nodes):
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ClusterProcess({self.bootstrap}, data_dir={self.data_dir})"


_LIVE_CLUSTERS: weakref.WeakSet[ClusterProcess] = weakref.WeakSet()


@atexit.register
def _close_leftover_clusters() -> None:
    for cluster in list(_LIVE_CLUSTERS):
        with contextlib.suppress(Exception):
            cluster.close()


class ClusterFactory:
    """Makes ``ClusterProcess``es and closes them all with ``close_all()`` (the
    ``reference_cluster`` fixture)."""

    def __init__(self) -> None:
        self.clusters: list[ClusterProcess] = []

    def __call__(self, nodes: int = 3, config: Mapping[str, Any] | None = None, *, start: bool = True,
                 **kwargs: Any) -> ClusterProcess:
        cluster = ClusterProcess(nodes, config, **kwargs)
        self.clusters.append(cluster)
        if start:
            cluster.start()
        return cluster

    def close_all(self) -> None:
        errors = []
        for cluster in self.clusters:
            try:
                cluster.close()
            except Exception as exc:  # keep closing the rest
                errors.append(exc)
        self.clusters.clear()
        if errors:
            raise errors[0]
