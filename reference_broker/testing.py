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
* The pytest fixtures ``broker`` (one broker per session) and ``broker_factory`` come from
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
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from reference_broker.__main__ import LISTENING_PREFIX
from reference_broker._event_loop import loop_factory
from reference_broker.config import BrokerConfig

__all__ = [
    "EMBEDDED_DEFAULTS",
    "LISTENING_PREFIX",
    "BrokerFactory",
    "BrokerProcess",
    "BrokerStartError",
    "InProcessBroker",
    "run_in_process",
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
