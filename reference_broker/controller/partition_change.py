"""Computing one partition's next state: Kafka's PartitionChangeBuilder.

Given a partition, the ISR and replicas it should have, and which brokers may lead, ``build()``
returns the PartitionChangeRecord that gets there, or None when nothing changes:

- Leader election. A clean election keeps a current leader that is still acceptable and in the
  target ISR, else takes the first acceptable replica (in replica order) in the target ISR.
  A preferred election takes the first replica when it qualifies. An unclean election (only when
  ``unclean.leader.election.enable``) takes an acceptable replica outside the ISR when none is in
  it; the ISR becomes that leader alone and the partition is RECOVERING, which may lose records.
- An ISR that would become empty is left as it was (with no leader), so the last in-sync replica
  is remembered and leads again when it returns.
- A reassignment completes once every adding replica is in the target ISR: the replicas become the
  target set, the removed ones leave the ISR, and a leader that was removed is replaced.
- Removing replicas bumps the leader epoch even when the leader stays, so followers that were
  dropped stop fetching.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Sequence

from reference_broker import internal_records as rec
from reference_broker.metadata.image import NO_LEADER, RECOVERING, PartitionRegistration


class Election(enum.Enum):
    PREFERRED = 0
    ONLINE = 1
    UNCLEAN = 2


class PartitionChangeBuilder:
    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: uuid.UUID,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
    ):
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.target_isr: list[int] = list(partition.isr)
        self.target_replicas: list[int] = list(partition.replicas)
        self.target_adding: list[int] = list(partition.adding_replicas)
        self.target_removing: list[int] = list(partition.removing_replicas)
        self.election = Election.ONLINE
        self.target_recovery_state = partition.leader_recovery_state

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self.target_isr = list(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self.target_replicas = list(replicas)
        return self

    def set_target_adding(self, adding: Sequence[int]) -> PartitionChangeBuilder:
        self.target_adding = list(adding)
        return self

    def set_target_removing(self, removing: Sequence[int]) -> PartitionChangeBuilder:
        self.target_removing = list(removing)
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    def set_target_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self.target_recovery_state = state
        return self

    # -- election --------------------------------------------------------------------------------
    def _valid_new_leader(self, replica: int) -> bool:
        return replica in self.target_isr and self.is_acceptable_leader(replica)

    def _elect(self) -> tuple[int, bool]:
        """(leader, unclean) the election settles on."""
        current = self.partition.leader
        if self.election == Election.PREFERRED:
            preferred = self.target_replicas[0] if self.target_replicas else NO_LEADER
            if preferred != NO_LEADER and self._valid_new_leader(preferred):
                return preferred, False
        if current in self.target_replicas and self._valid_new_leader(current):
            return current, False
        for replica in self.target_replicas:
            if self._valid_new_leader(replica):
                return replica, False
        if self.election == Election.UNCLEAN:
            for replica in self.target_replicas:
                if self.is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    def _complete_reassignment(self) -> None:
        if not self.target_adding and not self.target_removing:
            return
        if any(r not in self.target_isr for r in self.target_adding):
            return
        isr = [r for r in self.target_isr if r not in self.target_removing]
        if not isr:
            return
        self.target_replicas = [r for r in self.target_replicas if r not in self.target_removing]
        self.target_isr = isr
        self.target_adding = []
        self.target_removing = []

    # -- the record --------------------------------------------------------------------------------
    def build(self) -> rec.PartitionChangeRecord | None:
        self._complete_reassignment()
        record = rec.PartitionChangeRecord(topic_id=self.topic_id, partition_id=self.partition_id)
        part = self.partition
        leader, unclean = self._elect()
        if leader != part.leader:
            record.leader = leader
            if unclean:
                record.isr = [leader]
                if part.leader_recovery_state != RECOVERING:
                    record.leader_recovery_state = RECOVERING
        if record.leader == -2 and any(r not in self.target_replicas for r in part.replicas):
            # Replicas removed: the same leader in a new epoch, so removed followers are fenced.
            record.leader = part.leader
        if record.isr is None and self.target_isr and list(part.isr) != self.target_isr:
            record.isr = list(self.target_isr)
        if list(part.replicas) != self.target_replicas:
            record.replicas = list(self.target_replicas)
        if list(part.adding_replicas) != self.target_adding:
            record.adding_replicas = list(self.target_adding)
        if list(part.removing_replicas) != self.target_removing:
            record.removing_replicas = list(self.target_removing)
        if (
            record.leader_recovery_state == -1
            and not unclean
            and self.target_recovery_state != part.leader_recovery_state
        ):
            record.leader_recovery_state = self.target_recovery_state
        changed = (
            record.leader != -2
            or record.isr is not None
            or record.replicas is not None
            or record.adding_replicas is not None
            or record.removing_replicas is not None
            or record.leader_recovery_state != -1
        )
        return record if changed else None
