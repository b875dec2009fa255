"""The node's raft client: :class:`RaftCore` driven on the event loop over peer connections.

One task runs the core's timers and sends what it queues (each request its own task, so a dead
peer delays nobody); answers and inbound requests (through ``raft.handlers``) go back into the
core on the loop, so the core is only ever touched by one coroutine at a time. After every
change, committed batches and leader changes are handed to the registered listeners, in offset
order, each batch once; a snapshot to load (the latest at start, one downloaded from the leader)
goes to them before any batch after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from reference_broker.network.peer import (
    PeerChannels,
    PeerConnection,
    PeerConnectionError,
    PeerUnsupportedError,
)
from reference_broker.raft import wire
from reference_broker.raft.core import LEADER, NotLeaderError, RaftCore, RaftTimeouts
from reference_broker.raft.log import MetadataLogSettings, ReplicatedLog
from reference_broker.raft.messages import (
    INVALID_REQUEST,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    CommittedBatch,
    FetchRequest,
    FetchSnapshotRequest,
    LeaderAndEpoch,
    Outbound,
)
from reference_broker.raft.snapshot import SnapshotId, SnapshotWriter
from reference_broker.raft.voter_changes import Answer, PendingChange, VoterChanges
from reference_broker.raft.voter_set import NO_DIRECTORY, Endpoint, Voter, VoterSet
from sdk.protocol import messages as m
from sdk.protocol.messages import Message

log = logging.getLogger("reference_broker.raft")

__all__ = ["NotLeaderError", "RaftClient", "RaftListener", "parse_bootstrap_servers",
           "parse_voters"]


class RaftListener(Protocol):
    def handle_commit(self, batch: CommittedBatch) -> None: ...
    def handle_load_snapshot(self, snapshot: Any) -> None: ...
    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...


def parse_voters(voters: list[str] | str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters`` (``id@host:port`` entries) as ``{id: (host, port)}``."""
    out: dict[int, tuple[str, int]] = {}
    for item in _entries(voters):
        node, sep, address = item.partition("@")
        if not sep or not node.isdigit():
            raise ValueError(f"controller.quorum.voters: {item!r} is not id@host:port")
        if int(node) in out:
            raise ValueError(f"controller.quorum.voters: voter {node} is listed twice")
        out[int(node)] = _host_port("controller.quorum.voters", address, item, "id@host:port")
    return out


def _entries(setting: list[str] | str) -> list[str]:
    items = setting.split(",") if isinstance(setting, str) else setting
    return [i.strip() for i in items if i.strip()]


def _host_port(setting: str, address: str, item: str, form: str) -> tuple[str, int]:
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not host:
        raise ValueError(f"{setting}: {item!r} is not {form}")
    return host.strip("[]"), int(port)


def parse_bootstrap_servers(servers: list[str] | str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.bootstrap.servers`` (``host:port`` entries) as ``{-1: (host, port),
    -2: ...}``: Kafka gives bootstrap servers negative ids, never a node's."""
    return {-i: _host_port("controller.quorum.bootstrap.servers", item, item, "host:port")
            for i, item in enumerate(_entries(servers), 1)}


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class RaftClient:
    """See the module docstring; the interface the controller and metadata loader use."""

    #: how long the leader holds a Fetch that has nothing new (its answer carries the HW)
    fetch_max_wait_ms = 500

    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], metadata_log_dir: Path,
                 *, cluster_id: str = "", timeouts: RaftTimeouts | None = None,
                 local_host: str | None = None,
                 log_settings: MetadataLogSettings | None = None,
                 bootstrap: dict[int, tuple[str, int]] | None = None,
                 directory_id: uuid.UUID = NO_DIRECTORY,
                 controller_listener: str = "CONTROLLER",
                 endpoints: tuple[Endpoint, ...] = ()) -> None:
        self.node_id = node_id
        #: voter id -> controller address, kept current (a dynamic quorum's voters are the log's;
        #: until they are known, the bootstrap servers under their negative ids). Shared with the
        #: broker, whose controller channel and DescribeCluster read it.
        self.voters = voters
        #: ``controller.quorum.bootstrap.servers`` by negative id: a dynamic quorum when set
        self.bootstrap = dict(bootstrap or {})
        self.directory_id = directory_id
        self.controller_listener = controller_listener
        #: this node's advertised controller listeners (what it announces as a voter)
        self.endpoints = endpoints
        self.voter_changes: VoterChanges | None = None
        self._synced_voters: VoterSet | None = None
        self.metadata_log_dir = Path(metadata_log_dir)
        self.cluster_id = cluster_id
        self.timeouts = timeouts or RaftTimeouts()
        self.log_settings = log_settings or MetadataLogSettings()
        self._local_host = local_host
        self.channels = PeerChannels(f"raft-{node_id}", local_host=local_host,
                                     request_timeout_s=self.timeouts.request_timeout_ms / 1000,
                                     connect_timeout_s=self.timeouts.request_timeout_ms / 1000)
        for voter, (host, port) in {**voters, **self.bootstrap}.items():
            self.channels.update(voter, host, port)
        self.core: RaftCore | None = None
        self._listeners: list[RaftListener] = []
        self._notified = LeaderAndEpoch(None, 0)
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._commit_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._settled = asyncio.Event()  # a voter change settled

    def use_connection_factory(self, factory: Callable[..., PeerConnection]) -> None:
        """Open the connections to the other voters with ``factory`` (the controller listener's
        security, ``reference_broker.cluster.inter_broker``); before ``start`` only."""
        if self._task is not None:
            raise RuntimeError("the raft client's connections are chosen before it starts")
        timeout_s = self.timeouts.request_timeout_ms / 1000
        self.channels = PeerChannels(self.channels.client_id, local_host=self._local_host,
                                     request_timeout_s=timeout_s, connect_timeout_s=timeout_s,
                                     factory=factory)
        for voter, (host, port) in {**self.voters, **self.bootstrap}.items():
            self.channels.update(voter, host, port)

    # -- the interface of the design ------------------------------------------------------------

    def register(self, listener: RaftListener) -> None:
        self._listeners.append(listener)

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.core.leader_and_epoch if self.core is not None else LeaderAndEpoch(None, 0)

    @property
    def high_watermark(self) -> int | None:
        return self.core.high_watermark if self.core is not None else None

    @property
    def caught_up(self) -> bool:
        """Whether the listeners have been given every committed entry (``RaftCore.caught_up``)."""
        return self.core is not None and self.core.caught_up

    @property
    def is_leader(self) -> bool:
        return self.core is not None and self.core.role == LEADER

    async def append(self, records: list[Message], *, epoch: int) -> int:
        """Leader only: append ``records`` as one batch of ``epoch``; its last offset."""
        if self.core is None:
            raise NotLeaderError("the raft client is not started")
        last = self.core.append(records, epoch, _now_ms())
        self._kick()
        return last

    def create_snapshot(self, last_contained_offset: int, epoch: int,
                        last_contained_log_timestamp: int = -1) -> SnapshotWriter | None:
        """A writer for the snapshot of the committed log up to ``last_contained_offset`` (whose
        batch is of ``epoch``); None if that snapshot (or a newer one) exists. Once the writer is
        frozen, older snapshots and segments go by ``metadata.max.retention.*``."""
        if self.core is None:
            return None
        writer = self.core.create_snapshot(last_contained_offset, epoch,
                                           last_contained_log_timestamp)
        if writer is not None:
            writer._on_freeze = self._snapshot_written
        return writer

    def _snapshot_written(self, snapshot_id: SnapshotId) -> None:
        core = self.core
        if core is None:
            return
        core.log.snapshot_added(snapshot_id)
        settings = self.log_settings
        if core.log.clean(settings.retention_bytes, settings.retention_ms, int(time.time() * 1000)):
            log.info("raft node %d: metadata log now starts at %d (snapshots %s)", self.node_id,
                     core.log.start_offset, [s.file_name for s in core.log.snapshots])

    async def start(self) -> None:
        self.metadata_log_dir.mkdir(parents=True, exist_ok=True)
        raft_log = ReplicatedLog.open(self.metadata_log_dir,
                                      segment_bytes=self.log_settings.segment_bytes)
        static: set[int] | VoterSet = VoterSet() if self.bootstrap else set(self.voters)
        self.core = RaftCore(self.node_id, static, raft_log, raft_log.directory,
                             timeouts=self.timeouts, now_ms=_now_ms(),
                             directory_id=self.directory_id,
                             bootstrap_ids=tuple(sorted(self.bootstrap, reverse=True)),
                             endpoints=self.endpoints)
        self.voter_changes = VoterChanges(self.core)
        self._sync_voters()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="raft")
        log.info("raft node %d started: voters %s, epoch %d", self.node_id,
                 sorted(self.voters), self.core.epoch)

    async def stop(self) -> None:
        core = self.core
        if core is None:
            return
        if core.role == LEADER:
            core.resign(_now_ms())
            sends = [self._send(out) for out in core.take_outbox()]
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), 1.0)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._sends):
            task.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
        await self.channels.close()
        core.log.close()
        self.core = None

    # -- the loop ------------------------------------------------------------------------------

    def wake_loop(self) -> None:
        """Run the loop now (a request changed the core's state) without waking held Fetches."""
        self._wake.set()

    def _kick(self) -> None:
        """Something changed: run the loop and wake the Fetches the leader is holding."""
        self._wake.set()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _run(self) -> None:
        assert self.core is not None
        core = self.core
        while True:
            try:
                core.poll(_now_ms())
                if self.voter_changes is not None and self.voter_changes.poll(_now_ms()):
                    self._settled.set()
                self._sync_voters()
                for out in core.take_outbox():
                    task = asyncio.get_running_loop().create_task(self._send(out))
                    self._sends.add(task)
                    task.add_done_callback(self._sends.discard)
                self._deliver()
            except Exception:
                log.exception("raft node %d: the loop failed; retrying", self.node_id)
            delay = max(0, core.next_deadline_ms() - _now_ms()) / 1000
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(delay, 0.5))

    def _deliver(self) -> None:
        core = self.core
        assert core is not None
        leader = core.leader_and_epoch
        if leader != self._notified:
            self._notified = leader
            log.info("raft node %d: leader %s in epoch %d (%s)", self.node_id, leader.leader_id,
                     leader.epoch, core.role)
            for listener in self._listeners:
                listener.handle_leader_change(leader)
        snapshot_id = core.take_snapshot_to_load()
        if snapshot_id is not None:
            reader = core.log.read_snapshot(snapshot_id)
            origin = "downloaded from the leader" if snapshot_id == core.downloaded else "stored"
            log.info("raft node %d: loading snapshot %s (%s, %d records)", self.node_id,
                     snapshot_id.file_name, origin, len(reader.records))
            for listener in self._listeners:
                listener.handle_load_snapshot(reader)
        for batch in core.committed_batches():
            for listener in self._listeners:
                listener.handle_commit(batch)

    async def _send(self, out: Outbound) -> None:
        core = self.core
        assert core is not None
        request = wire.to_request(out.request, self.cluster_id, out.destination, core)
        try:
            response = await self.channels.send(out.destination, request)
        except (PeerConnectionError, PeerUnsupportedError, KeyError) as exc:
            log.debug("raft node %d: %s to %d failed: %s", self.node_id,
                      type(out.request).__name__, out.destination, exc)
            if isinstance(out.request, (FetchRequest, FetchSnapshotRequest)):
                await asyncio.sleep(self.timeouts.election_backoff_max_ms / 10000)
                core.fetch_failed()
                self._kick()
            return
        if self.core is not core:
            return
        for endpoint in getattr(response, "node_endpoints", None) or ():
            # the leader's address as the answering node knows it: fresher than an observer's
            # own voter set, which may be of an older run
            self.channels.update(endpoint.node_id, endpoint.host, endpoint.port)
        try:
            wire.feed_response(core, out.destination, out.request, response, _now_ms())
        except wire.WireError as exc:
            log.warning("raft node %d: bad answer from %d: %s", self.node_id, out.destination, exc)
            if isinstance(out.request, (FetchRequest, FetchSnapshotRequest)):
                core.fetch_failed()
        self._kick()

    # -- inbound (raft.handlers) -----------------------------------------------------------------

    def changed(self) -> asyncio.Event:
        """Set at the next change of the log or the high watermark (a held Fetch waits on it)."""
        return self._changed

    # -- the voter set (KIP-853) -------------------------------------------------------------------

    def _sync_voters(self) -> None:
        """Point the channels and the shared voter map at the voter set in force (a dynamic
        quorum's changes with its log); the bootstrap servers stand in while it is empty."""
        core = self.core
        if core is None or not self.bootstrap or core.voter_set == self._synced_voters:
            return
        self._synced_voters = core.voter_set
        addresses: dict[int, tuple[str, int]] = {}
        for voter in core.voter_set.voters.values():
            endpoint = voter.endpoint(self.controller_listener) or voter.endpoint()
            if endpoint is not None:
                addresses[voter.node_id] = (endpoint.host, endpoint.port)
                self.channels.update(voter.node_id, endpoint.host, endpoint.port)
        self.voters.clear()
        self.voters.update(addresses or self.bootstrap)
        log.info("raft node %d: voters %s (kraft.version %d)", self.node_id, sorted(addresses),
                 core.kraft_version)

    def leader_endpoint(self, leader_id: int | None) -> tuple[str, int] | None:
        """The controller address of ``leader_id`` for Fetch's NodeEndpoints: this node's own as
        it advertises it now, another's as the voter set has it (None when unknown)."""
        core = self.core
        if core is None or leader_id is None:
            return None
        if leader_id == self.node_id:
            endpoints = self.endpoints
        else:
            voter = core.voter_set.voters.get(leader_id)
            endpoints = () if voter is None else voter.endpoints
        found = next((e for e in endpoints if e.name == self.controller_listener), None)
        return None if found is None else (found.host, found.port)

    async def _await_change(self, pending: PendingChange | None, timeout_ms: int) -> Answer:
        """The answer of ``pending`` (the change begun), once settled (REQUEST_TIMED_OUT after
        ``timeout_ms``)."""
        if pending is None:
            raise RuntimeError("no voter change was begun")
        deadline = time.monotonic() + timeout_ms / 1000
        while pending.answer is None:
            self._kick()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Answer(REQUEST_TIMED_OUT, "Request timed out waiting for the voter change to commit")
            self._settled.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._settled.wait(), min(remaining, 0.1))
        return pending.answer

    async def add_voter(self, voter_id: int, directory_id: uuid.UUID,
                        listeners: list[tuple[str, str, int]], timeout_ms: int) -> Answer:
        """AddRaftVoter on the leader (Kafka's AddVoterHandler): the checks, the new voter's
        ApiVersions (its kraft.version range), the append, the wait for the commit."""
        changes = self.voter_changes
        if changes is None:
            return Answer(NOT_LEADER_OR_FOLLOWER, "the raft client is not started")
        endpoints = tuple(Endpoint(n, h, p) for n, h, p in listeners)
        default = next((e for e in endpoints if e.name == self.controller_listener), None)
        if default is None:
            return Answer(INVALID_REQUEST, f"Add voter request didn't include the endpoint for the default"
                          f" listener {self.controller_listener}")
        refused = changes.begin_add(voter_id, directory_id, _now_ms())
        if refused is not None:
            return refused
        pending = changes.pending
        error, versions = await self._kraft_versions_of(voter_id, default.host, default.port)
        changes.finish_add(Voter(voter_id, directory_id, endpoints, versions), error, _now_ms())
        return await self._await_change(pending, timeout_ms)

    async def _kraft_versions_of(self, voter_id: int, host: str,
                                 port: int) -> tuple[int, tuple[int, int]]:
        """ApiVersions of a would-be voter: (error code, its supported kraft.version range)."""
        self.channels.update(voter_id, host, port)
        try:
            response = await self.channels.send(voter_id, m.ApiVersionsRequest(
                client_software_name="reference_broker", client_software_version="1"))
        except (PeerConnectionError, PeerUnsupportedError) as exc:
            log.info("raft node %d: ApiVersions to would-be voter %d failed: %s", self.node_id,
                     voter_id, exc)
            return REQUEST_TIMED_OUT, (0, 0)
        for feature in getattr(response, "supported_features", None) or ():
            if feature.name == "kraft.version":
                return getattr(response, "error_code", 0), (feature.min_version,
                                                            feature.max_version)
        return getattr(response, "error_code", 0), (0, 0)

    async def remove_voter(self, voter_id: int, directory_id: uuid.UUID) -> Answer:
        changes = self.voter_changes
        if changes is None:
            return Answer(NOT_LEADER_OR_FOLLOWER, "the raft client is not started")
        refused = changes.remove(voter_id, directory_id, _now_ms())
        if refused is not None:
            return refused
        pending = changes.pending
        self._kick()
        return await self._await_change(pending, self.timeouts.request_timeout_ms)

    def upgrade_kraft_version(self, epoch: int, version: int, validate_only: bool) -> None:
        """Leader only: upgrade kraft.version (``VoterChanges.upgrade_kraft_version``)."""
        changes = self.voter_changes
        if changes is None:
            raise NotLeaderError("the raft client is not started")
        if changes.upgrade_kraft_version(epoch, version, validate_only, _now_ms()):
            self._kick()

    def update_voter(self, voter: Voter) -> Answer:
        changes = self.voter_changes
        if changes is None:
            return Answer(NOT_LEADER_OR_FOLLOWER, "the raft client is not started")
        answer = changes.update(voter, _now_ms())
        self._kick()
        return answer

