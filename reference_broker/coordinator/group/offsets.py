"""Committed offsets of the classic groups, Kafka's ``OffsetMetadataManager`` beside the membership
of ``GroupCoordinator`` (Kafka's ``GroupMetadataManager``): OffsetCommit, TxnOffsetCommit and its
offsets pending until the transaction's marker, OffsetFetch, OffsetDelete and offset retention.

The groups themselves, their members and generations belong to the coordinator; this side reads
them to validate a commit, creates a group that only commits offsets, and writes its records
through the coordinator's store (``write_records``), so a commit takes effect only once written
(in cluster mode, once the ISR holds it: ``GroupCoordinator.on_committed``).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from reference_broker.coordinator.group import records
from reference_broker.coordinator.group.state import CommittedOffset, Group, GroupState
from reference_broker.coordinator.write_errors import write_error_code
from sdk.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from reference_broker.coordinator.group.coordinator import GroupCoordinator, Record

log = logging.getLogger("reference_broker.group_coordinator")

E = ErrorCode


class GroupOffsets:
    """The offsets of every group of one ``GroupCoordinator``."""

    def __init__(self, membership: GroupCoordinator):
        self.membership = membership

    def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], CommittedOffset],
        *,
        api_version: int = 8,
    ) -> dict[tuple[str, int], int]:
        """Kafka's ``handleCommitOffsets``: an error code per partition."""

        def all_(code: int) -> dict[tuple[str, int], int]:
            return dict.fromkeys(offsets, code)

        if not group_id:
            return all_(E.INVALID_GROUP_ID)
        if unavailable := self.membership.unavailable(group_id):
            return all_(unavailable)
        group = self.membership.groups.get(group_id)
        if group_id in self.membership.consumer.groups:
            # A KIP-848 group: the member epoch is checked instead of the generation.
            code = self.membership.consumer.validate_offset_commit(
                group_id, member_id, generation, transactional=False, api_version=api_version
            )
            if code:
                return all_(code)
            now = self.membership.clock.now_ms()
            group = self.membership.groups.setdefault(group_id, Group(group_id, now))
        elif group is None:
            if generation >= 0:
                return all_(E.GROUP_ID_NOT_FOUND if api_version >= 9 else E.ILLEGAL_GENERATION)
            group = self.membership.groups[group_id] = Group(group_id, self.membership.clock.now_ms())
        if group.is_(GroupState.DEAD):
            return all_(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(group_instance_id, member_id):
            return all_(E.FENCED_INSTANCE_ID)
        if group_id in self.membership.consumer.groups:
            pass
        elif not (generation < 0 and group.is_(GroupState.EMPTY)):
            if group.is_(GroupState.COMPLETING_REBALANCE):
                return all_(E.REBALANCE_IN_PROGRESS)
            member = group.members.get(member_id)
            if member is None:
                return all_(E.UNKNOWN_MEMBER_ID)
            if generation != group.generation:
                return all_(E.ILLEGAL_GENERATION)
            self.membership.schedule_heartbeat(group, member)
        result, accepted, batch = self._offset_records(group_id, offsets, transactional=False)
        error = self.membership.write_records(group_id, batch)
        for tp in accepted:
            result[tp] = error
        if not error and accepted:
            self.membership.on_committed(self.membership.partition_for(group_id),
                                         lambda: group.offsets.update(accepted))
        return result

    def _offset_records(
        self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset], *, transactional: bool
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], CommittedOffset], list[Record]]:
        """The per-partition checks of a commit: (errors of the refused partitions, the accepted
        offsets, their ``__consumer_offsets`` records). Transactional offsets carry no expiry."""
        result: dict[tuple[str, int], int] = {}
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        for tp, committed in offsets.items():
            if not self.membership.topic_exists(*tp):
                result[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif len(committed.metadata.encode()) > self.membership.config.offset_metadata_max_bytes:
                result[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = committed
        batch: list[Record] = [
            (
                records.offset_key(group_id, t, p),
                records.offset_value(
                    c.offset,
                    c.leader_epoch,
                    c.metadata,
                    c.commit_timestamp_ms,
                    None if transactional else c.expire_timestamp_ms,
                ),
            )
            for (t, p), c in accepted.items()
        ]
        return result, accepted, batch

    def commit_transactional_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], CommittedOffset],
    ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit (Kafka's ``doTxnCommitOffsets``, KIP-447 checks when the member and
        generation are given): the offsets are written as a transactional batch of
        ``producer_id`` and kept pending until its transaction's marker
        (``complete_transactional_offsets``)."""
        if unavailable := self.membership.unavailable(group_id):
            return dict.fromkeys(offsets, unavailable)
        group = self.membership.groups.get(group_id)
        if group is None:
            group = self.membership.groups[group_id] = Group(group_id, self.membership.clock.now_ms())
        if group.is_(GroupState.DEAD):
            return dict.fromkeys(offsets, E.COORDINATOR_NOT_AVAILABLE)
        if group_id in self.membership.consumer.groups:
            # A KIP-848 group: the member epoch is checked instead of the generation.
            code = self.membership.consumer.validate_offset_commit(
                group_id, member_id, generation, transactional=True, api_version=0
            )
        else:
            code = self._validate_classic_member(group, member_id, group_instance_id, generation)
        if code:
            return dict.fromkeys(offsets, code)
        result, accepted, batch = self._offset_records(group_id, offsets, transactional=True)
        error: int = E.NONE
        if batch and self.membership.store is not None:
            try:
                self.membership.store.write_transactional(
                    self.membership.partition_for(group_id), batch, producer_id, producer_epoch
                )
            except Exception as exc:
                log.info("transactional offset commit of group %s refused: %s", group_id, exc)
                error = write_error_code(exc)
        if not error and accepted:
            self.membership.on_committed(
                self.membership.partition_for(group_id),
                lambda: group.pending_transactional_offsets.setdefault(producer_id, {}).update(accepted),
            )
        for tp in accepted:
            result[tp] = error
        return result

    @staticmethod
    def _validate_classic_member(
        group: Group, member_id: str, group_instance_id: str | None, generation: int
    ) -> int:
        """Kafka's ``validateMember`` for a transactional commit to a classic group, each check in
        turn: the instance id (unknown, or held by another member id: fenced), then the member
        id, then the generation. An empty group with no generation given accepts anyone."""
        if group_instance_id is not None and not (generation < 0 and group.is_(GroupState.EMPTY)):
            if group_instance_id not in group.static_members:
                return E.UNKNOWN_MEMBER_ID
            if group.is_static_member_fenced(group_instance_id, member_id):
                return E.FENCED_INSTANCE_ID
        if member_id and member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation >= 0 and generation != group.generation:
            return E.ILLEGAL_GENERATION
        return E.NONE

    def complete_transactional_offsets(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker on ``__consumer_offsets`` partition ``partition``: the producer's
        pending offsets of the groups there become committed (or are dropped), after the changes
        written before the marker."""
        self.membership.on_committed(partition, lambda: self._complete(partition, producer_id, commit))

    def _complete(self, partition: int, producer_id: int, commit: bool) -> None:
        for group in self.membership.groups.values():
            if self.membership.partition_for(group.group_id) != partition:
                continue
            pending = group.pending_transactional_offsets.pop(producer_id, None)
            if pending and commit:
                group.offsets.update(pending)

    def load_transactional_offsets(self, pending: dict[int, list[Record]]) -> None:
        """Offsets of transactions still open when the partition was read (by producer id)."""
        now = self.membership.clock.now_ms()
        for producer_id, entries in pending.items():
            for key_bytes, value_bytes in entries:
                key = records.parse_key(key_bytes)
                if not isinstance(key, records.OffsetKey) or value_bytes is None:
                    continue
                v = records.parse_offset_value(value_bytes)
                group = self.membership.groups.get(key.group)
                if group is None:
                    group = self.membership.groups[key.group] = Group(key.group, now)
                pending_offsets = group.pending_transactional_offsets.setdefault(producer_id, {})
                pending_offsets[(key.topic, key.partition)] = CommittedOffset(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                )

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[tuple[str, int]] | None,
        require_stable: bool = False,
        member: tuple[str | None, int] = (None, -1),
    ) -> tuple[int, dict[tuple[str, int], tuple[CommittedOffset | None, int]]]:
        """(group error, {partition: (committed offset or None, partition error)}); ``partitions``
        None means every partition the group has an offset for. ``member`` (OffsetFetch v9: member
        id, member epoch) is checked against a consumer group's member. Answered at once: with
        ``require_stable`` only where every write is committed as soon as it is stored (a single
        node); a cluster's coordinator answers that through ``fetch_stable_offsets``."""
        if error := self._fetch_refused(group_id, member, require_stable):
            return error, {}
        return self._read_offsets(group_id, partitions, require_stable)

    async def fetch_stable_offsets(
        self,
        group_id: str,
        partitions: list[tuple[str, int]] | None,
        member: tuple[str | None, int] = (None, -1),
    ) -> tuple[int, dict[tuple[str, int], tuple[CommittedOffset | None, int]]]:
        """OffsetFetch with ``require_stable``, Kafka's write operation without records
        (``GroupCoordinatorService.fetchOffsets``): the member is checked against the groups as
        written last, then the answer waits until everything written to the group's partition
        so far is committed (``GroupCoordinator.until_committed``), so it never names an offset
        or a member the partition's next leader could lack; the offsets are read then (they
        change only as their writes commit). A wait that fails is NOT_COORDINATOR, the
        leadership moved or the writes were not committed in time (Kafka's
        ``handleOffsetFetchException`` maps REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS to
        NOT_COORDINATOR, which older consumers retry after finding the coordinator again)."""
        if error := self._fetch_refused(group_id, member, require_stable=True):
            return error, {}
        until_committed = self.membership.until_committed
        if until_committed is not None:
            if await until_committed(self.membership.partition_for(group_id)):
                return E.NOT_COORDINATOR, {}
            if unavailable := self.membership.unavailable(group_id):
                return unavailable, {}
        return self._read_offsets(group_id, partitions, require_stable=True)

    def _fetch_refused(self, group_id: str, member: tuple[str | None, int], require_stable: bool) -> int:
        """Why OffsetFetch answers the group with an error (0: it does not): the coordinator
        cannot serve it, or a consumer group's member check (``validate_offset_fetch``)."""
        if unavailable := self.membership.unavailable(group_id):
            return unavailable
        return self.membership.consumer.validate_offset_fetch(
            group_id, *member, require_stable=require_stable)

    def _read_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None, require_stable: bool
    ) -> tuple[int, dict[tuple[str, int], tuple[CommittedOffset | None, int]]]:
        """The committed offsets; with ``require_stable`` a partition a transaction holds a
        pending offset for is UNSTABLE_OFFSET_COMMIT."""
        group = self.membership.groups.get(group_id)
        stored = group.offsets if group is not None else {}
        wanted = sorted(stored) if partitions is None else partitions
        pending: set[tuple[str, int]] = set()
        if require_stable and group is not None:
            for txn_offsets in group.pending_transactional_offsets.values():
                pending.update(txn_offsets)
        answer: dict[tuple[str, int], tuple[CommittedOffset | None, int]] = {}
        for tp in wanted:
            if tp in pending:
                answer[tp] = (None, E.UNSTABLE_OFFSET_COMMIT)
            else:
                answer[tp] = (stored.get(tp), E.NONE)
        return E.NONE, answer

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete (KIP-496): offsets of topics the group no longer consumes."""
        if unavailable := self.membership.unavailable(group_id):
            return unavailable, {}
        group = self.membership.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return E.GROUP_ID_NOT_FOUND, {}
        if group.is_(GroupState.EMPTY):
            subscribed: set[str] = set()
        else:
            topics = group.subscribed_topics()
            if topics is None:
                return E.NON_EMPTY_GROUP, {}
            subscribed = topics
        result: dict[tuple[str, int], int] = {}
        doomed = []
        for tp in partitions:
            if not self.membership.topic_exists(*tp):
                result[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif tp[0] in subscribed:
                result[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                result[tp] = 0
                if tp in group.offsets:
                    doomed.append(tp)
        tombstones: list[Record] = [(records.offset_key(group_id, t, p), None) for t, p in doomed]
        error = self.membership.write_records(group_id, tombstones)
        if error:
            return error, {}
        if doomed:
            self.membership.on_committed(self.membership.partition_for(group_id),
                                         lambda: self._forget_offsets(group, doomed))
        return E.NONE, result

    @staticmethod
    def _forget_offsets(group: Group, partitions: list[tuple[str, int]]) -> None:
        for tp in partitions:
            group.offsets.pop(tp, None)

    def expire_offsets(self) -> int:
        """Offset retention (KIP-211): an empty group's offsets expire ``offsets.retention.minutes``
        after it became empty (or after their commit, if later); an explicit expire timestamp (v2-v4
        retention_time_ms) wins. A group left with no offsets is removed. Tombstones are written.
        Returns how many offsets expired."""
        now = self.membership.clock.now_ms()
        expired_total = 0
        for group in list(self.membership.groups.values()):
            if group.is_(GroupState.DEAD):
                continue
            if self.membership.partition_for(group.group_id) in self.membership.loading:
                continue
            expired = []
            # A consumer group with members keeps the offsets of the topics it subscribes to; the
            # others expire from their commit time (KIP-496).
            subscribed = None if group.is_(GroupState.EMPTY) else group.subscribed_topics()
            consumer_group = self.membership.consumer.groups.get(group.group_id)
            if consumer_group is not None and consumer_group.members:
                subscribed = consumer_group.subscribed_topic_names()
            for tp, committed in group.offsets.items():
                if committed.expire_timestamp_ms is not None:
                    if now >= committed.expire_timestamp_ms:
                        expired.append(tp)
                elif group.is_(GroupState.EMPTY) and subscribed is None:
                    base = max(group.state_timestamp_ms, committed.commit_timestamp_ms)
                    if now - base >= self.membership.config.offsets_retention_ms:
                        expired.append(tp)
                elif (
                    subscribed is not None
                    and tp[0] not in subscribed
                    and now - committed.commit_timestamp_ms >= self.membership.config.offsets_retention_ms
                ):
                    expired.append(tp)
            if expired:
                batch: list[tuple[bytes, bytes | None]] = [
                    (records.offset_key(group.group_id, t, p), None) for t, p in expired
                ]
                if self.membership.write_records(group.group_id, batch):
                    continue
                self.membership.on_committed(self.membership.partition_for(group.group_id),
                                             functools.partial(self._forget_offsets, group, expired))
                expired_total += len(expired)
            if (
                group.is_(GroupState.EMPTY)
                and group.group_id not in self.membership.consumer.groups
                and not group.offsets
                and not group.pending_members
                and not group.pending_transactional_offsets  # its transaction's marker will need it
            ):
                # Kafka's cleanupGroupMetadata: an empty group with no offsets is removed.
                self.membership.drop_group(group)
        return expired_total
