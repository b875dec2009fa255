"""``ControllerService``: the quorum controller driven by the node's raft client.

It is the raft listener of the controller: every committed batch and snapshot is replayed into
the ``QuorumController``'s committed image, and leadership changes make this node's controller
active or inactive. Requests are handled one at a time in arrival order (Kafka's controller event
queue): the operation validates against the latest image, its records are appended to the
metadata log, and the answer is given once they are committed. When this node is not the active
controller, or loses leadership while an operation waits, the caller gets ``NotControllerError``
(answered NOT_CONTROLLER, so brokers look for the new active controller).

While active it also runs the controller's timers: fencing brokers whose session expired (every
``session_timeout/8``, as Kafka's periodic fencing task) and, with ``auto.leader.rebalance.enable``,
preferred leader elections every ``leader.imbalance.check.interval.seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from reference_broker import internal_records as rec
from reference_broker.controller.feature_control import FeatureUpdateError
from reference_broker.controller.quorum_controller import QuorumController
from reference_broker.controller.result import ControllerResult
from reference_broker.controller.settings import ControllerSettings
from sdk.protocol.errors import ErrorCode

log = logging.getLogger("reference_broker.controller")


class NotControllerError(Exception):
    """This node is not (or stopped being) the active controller."""


class _RaftKRaftVersion:
    """The raft client's kraft.version as the controller's feature control sees it (Kafka's
    KRaftVersionAccessor): an upgrade is made by the raft leader in the controller's epoch."""

    def __init__(self, service: ControllerService):
        self.service = service

    def kraft_version(self) -> int:
        core = self.service.raft.core
        return 0 if core is None else int(core.kraft_version)

    def voter_ids(self) -> frozenset[int]:
        core = self.service.raft.core
        return frozenset() if core is None else frozenset(core.voters)

    def upgrade_kraft_version(self, version: int, validate_only: bool) -> None:
        from reference_broker.raft.core import NotLeaderError
        from reference_broker.raft.voter_changes import KRaftUpgradeError, KRaftUpgradeStateError

        epoch = self.service.active_epoch
        if epoch is None:
            raise NotControllerError()
        try:
            self.service.raft.upgrade_kraft_version(epoch, version, validate_only)
        except NotLeaderError as exc:
            raise NotControllerError() from exc
        except KRaftUpgradeError as exc:
            raise FeatureUpdateError(ErrorCode.INVALID_UPDATE_VERSION, str(exc)) from exc
        except KRaftUpgradeStateError as exc:
            log.warning("controller %d: kraft.version upgrade refused: %s",
                        self.service.settings.node_id, exc)
            raise FeatureUpdateError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from exc


class ControllerService:
    def __init__(self, raft: Any, settings: ControllerSettings, clock: Callable[[], float] = time.monotonic):
        self.raft = raft
        self.settings = settings
        self.core = QuorumController(settings)
        self.core.features.kraft = _RaftKRaftVersion(self)
        self._clock = clock
        self._queue = asyncio.Lock()
        self._settled: asyncio.Event = asyncio.Event()
        self._active_epoch: int | None = None
        self._activation: asyncio.Task[None] | None = None
        self._timers: asyncio.Task[None] | None = None
        self._ready = False
        raft.register(self)

    def now_ms(self) -> float:
        return self._clock() * 1000

    @property
    def active_epoch(self) -> int | None:
        """The raft epoch this node's controller is active in (None while it is not)."""
        return self._active_epoch

    @property
    def is_active(self) -> bool:
        return self._active_epoch is not None and self._ready

    # -- RaftListener ------------------------------------------------------------------------------------
    def handle_commit(self, batch: Any) -> None:
        self.core.replay_commit(list(batch.records), batch.last_offset, batch.epoch)
        if self.core.settled:
            self._settled.set()

    def handle_load_snapshot(self, snapshot: Any) -> None:
        self.core.load_snapshot(list(snapshot.records), snapshot.last_contained_offset, snapshot.epoch)

    def handle_leader_change(self, leader: Any) -> None:
        if leader.leader_id == self.settings.node_id:
            if self._active_epoch != leader.epoch:
                self._active_epoch = leader.epoch
                self._ready = False
                self._activation = asyncio.get_running_loop().create_task(self._activate(leader.epoch))
        elif self._active_epoch is not None:
            log.info(
                "controller %d is no longer active (leader %s, epoch %d)",
                self.settings.node_id,
                leader.leader_id,
                leader.epoch,
            )
            self._active_epoch = None
            self._ready = False
            self.core.abort()
            self._settled.set()  # wakes an operation waiting for a commit that will not come

    async def _activate(self, epoch: int) -> None:
        """Catch up on everything committed before this epoch (a NoOp record committed after it
        proves the image is complete), then bootstrap the cluster's features if new."""
        try:
            await self._write(ControllerResult([rec.NoOpRecord()]), epoch, force=True)
            self.core.activate(self.now_ms())
            self._ready = True
            await self.submit(lambda _now: self.core.bootstrap())
            log.info("controller %d is active in epoch %d", self.settings.node_id, epoch)
        except NotControllerError:
            return
        except Exception:
            log.exception("controller %d failed to activate in epoch %d", self.settings.node_id, epoch)

    # -- operations ----------------------------------------------------------------------------------------
    async def submit(self, operation: Callable[[float], ControllerResult]) -> Any:
        """Run ``operation(now_ms)`` in turn; its answer once its records are committed."""
        epoch = self._active_epoch
        if epoch is None or not self._ready:
            raise NotControllerError()
        async with self._queue:
            if self._active_epoch != epoch:
                raise NotControllerError()
            result = operation(self.now_ms())
            await self._write(result, epoch)
            return result.response

    async def _write(self, result: ControllerResult, epoch: int, force: bool = False) -> None:
        if not result.records:
            return
        if force:
            await self._queue.acquire()
        try:
            self.core.begin(result.records)
            self._settled.clear()
            try:
                last_offset = await self.raft.append(list(result.records), epoch=epoch)
            except Exception as exc:  # NotLeader, or the raft client stopping
                log.info("controller %d: append in epoch %d failed: %r", self.settings.node_id, epoch, exc)
                self.core.abort()
                raise NotControllerError() from exc
            self.core.appended(last_offset)
            while not self.core.settled:
                if self._active_epoch != epoch:
                    raise NotControllerError()
                await self._settled.wait()
                self._settled.clear()
        finally:
            if force:
                self._queue.release()

    # -- timers -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._timers = asyncio.get_running_loop().create_task(self._run_timers())

    async def stop(self) -> None:
        for task in (self._timers, self._activation):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._timers = self._activation = None

    async def _run_timers(self) -> None:
        interval = self.settings.stale_broker_check_interval_s
        next_rebalance = self._clock() + self.settings.leader_imbalance_check_interval_s
        while True:
            await asyncio.sleep(interval)
            if not self.is_active:
                continue
            try:
                while True:  # one broker per operation, as Kafka fences them
                    fenced = await self.submit(self.core.fence_stale_brokers)
                    if fenced is None:
                        break
                    log.info(
                        "controller fenced broker %d: no heartbeat for %d ms",
                        fenced,
                        self.settings.session_timeout_ms,
                    )
                if self.settings.auto_leader_rebalance and self._clock() >= next_rebalance:
                    next_rebalance = self._clock() + self.settings.leader_imbalance_check_interval_s
                    await self.submit(lambda _now: self.core.rebalance_leaders())
            except NotControllerError:
                continue
