"""The broker: storage, handlers and the network server wired together, plus background chores.

``async with Broker(config) as broker:`` opens the logs (running recovery), binds the listener and
starts the retention loop; leaving the block stops accepting, drops connections, and closes the
logs cleanly (flush, close segments, write the checkpoints recovery would otherwise rebuild).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from reference_broker._event_loop import loop_name
from reference_broker.config import BrokerConfig
from reference_broker.handlers import HandlerRegistry
from reference_broker.handlers import install_all as install_handlers
from reference_broker.handlers.fetch_sessions import FetchSessionCache
from reference_broker.network.server import KafkaServer
from reference_broker.producer_ids import ProducerIdManager
from reference_broker.storage import Storage
from reference_broker.waiters import DataWaiters

log = logging.getLogger("reference_broker")
HOUSEKEEPING_INTERVAL_S = 5.0


class Broker:
    """One single-node Kafka broker serving ``config.data_dir`` on ``config.host:config.port``."""

    def __init__(self, config: BrokerConfig):
        self.config = config
        self.node_id = config.node_id
        self.waiters = DataWaiters()
        self.registry = HandlerRegistry(self)
        install_handlers(self.registry)
        self.storage: Storage | None = None
        self.producer_ids = ProducerIdManager(config.data_dir)
        self.fetch_sessions = FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"))
        self.cluster_id = ""
        self.server: KafkaServer | None = None
        self._chores: list[asyncio.Task[None]] = []
        self.host = config.host
        self.port = config.port

    @property
    def logs(self) -> Storage:
        assert self.storage is not None, "broker not started"
        return self.storage

    @property
    def advertised_host(self) -> str:
        return self.config.advertised_host

    @property
    def advertised_port(self) -> int:
        return self.config.advertised_port(self.port)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        data_dir = self.config.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.storage = Storage.open(self.config, on_data=self.waiters.notify)
        self.cluster_id = self.storage.cluster_id
        try:
            self.server = KafkaServer(
                self.registry, self.config.host, self.config.port, self.config.get("socket.request.max.bytes")
            )
            self.host, self.port = await self.server.start()
        except BaseException:
            self.storage.close()
            self.storage = None
            raise
        retention_s = self.config.get("log.retention.check.interval.ms") / 1000
        self._chores.append(
            asyncio.create_task(self._every(retention_s, self.logs.enforce_retention), name="retention")
        )
        self._chores.append(
            asyncio.create_task(
                self._every(HOUSEKEEPING_INTERVAL_S, self.logs.housekeeping), name="housekeeping"
            )
        )
        log.info(
            "broker %d (cluster %s) listening on %s:%d, data in %s, event loop %s",
            self.node_id,
            self.cluster_id,
            self.host,
            self.port,
            data_dir,
            loop_name(asyncio.get_running_loop()),
        )

    @staticmethod
    async def _every(interval_s: float, chore: Callable[[], None]) -> None:
        """Run ``chore`` every ``interval_s`` seconds; a failing run is logged, not fatal."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                chore()
            except Exception:
                log.exception("%s failed", getattr(chore, "__name__", chore))

    async def stop(self) -> None:
        for task in self._chores:
            task.cancel()
        for task in self._chores:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._chores.clear()
        if self.server is not None:
            await self.server.close()
            self.server = None
        self.waiters.notify_all()
        if self.storage is not None:
            self.storage.close()
            self.storage = None
        log.info("broker %d stopped", self.node_id)

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
