"""Replica placement for new partitions: Kafka's StripedReplicaPlacer.

Brokers are grouped by rack (``broker.rack``; brokers without one share the "no rack" group).
Each partition's first replica, its preferred leader, is an unfenced broker, taken from the racks
in turn so leaders spread over racks and brokers; the other replicas are striped over the
remaining racks, unfenced brokers before fenced ones, so a partition's replicas sit on as many
racks as there are. Brokers in controlled shutdown are not offered at all. Fenced brokers may
hold followers (they are registered and expected back), which is why the replication factor is
checked against every usable broker while at least one must be unfenced.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable

from sdk.protocol.errors import ErrorCode


class PlacementError(Exception):
    """The placement cannot be made; ``code`` is INVALID_REPLICATION_FACTOR."""

    def __init__(self, message: str):
        super().__init__(message)
        self.code = ErrorCode.INVALID_REPLICATION_FACTOR
        self.message = message


@dataclasses.dataclass(frozen=True)
class UsableBroker:
    id: int
    rack: str | None
    fenced: bool


class _Rack:
    def __init__(self) -> None:
        self.unfenced: list[int] = []
        self.fenced: list[int] = []
        self.next_unfenced = 0
        self.next_fenced = 0
        self.leader_rotation = 0

    def _take(self, brokers: list[int], start: int, taken: set[int]) -> tuple[int, int]:
        for step in range(len(brokers)):
            index = (start + step) % len(brokers)
            if brokers[index] not in taken:
                return brokers[index], index + 1
        return -1, start

    def take_leader(self, taken: set[int]) -> int:
        """The next partition's leader from this rack: one broker further each time, so leaders
        rotate over the rack's brokers; its followers here continue after it."""
        broker, self.next_unfenced = self._take(self.unfenced, self.leader_rotation, taken)
        if broker >= 0:
            self.leader_rotation += 1
        return broker

    def take_unfenced(self, taken: set[int]) -> int:
        broker, self.next_unfenced = self._take(self.unfenced, self.next_unfenced, taken)
        return broker

    def take_any(self, taken: set[int]) -> int:
        broker = self.take_unfenced(taken)
        if broker < 0:
            broker, self.next_fenced = self._take(self.fenced, self.next_fenced, taken)
        return broker


class StripedReplicaPlacer:
    """Places ``num_partitions`` x ``replication_factor`` replicas over ``brokers``."""

    def __init__(self, rng: random.Random | None = None):
        self.rng = rng or random.Random()

    def place(
        self, brokers: Iterable[UsableBroker], num_partitions: int, replication_factor: int
    ) -> list[list[int]]:
        racks: dict[str | None, _Rack] = {}
        total = unfenced = 0
        for b in sorted(brokers, key=lambda b: b.id):
            rack = racks.setdefault(b.rack, _Rack())
            (rack.fenced if b.fenced else rack.unfenced).append(b.id)
            total += 1
            unfenced += not b.fenced
        if replication_factor <= 0:
            raise PlacementError(
                f"Invalid replication factor {replication_factor}: the replication factor must be positive."
            )
        if unfenced == 0:
            raise PlacementError("All brokers are currently fenced.")
        if replication_factor > total:
            raise PlacementError(
                f"The target replication factor of {replication_factor} cannot be reached because only "
                f"{total} broker(s) are registered."
            )
        # Racks with an unfenced broker first, each group in a shuffled order; brokers shuffled too.
        names = sorted(racks, key=lambda n: (not racks[n].unfenced, n or ""))
        for rack in racks.values():
            self.rng.shuffle(rack.unfenced)
            self.rng.shuffle(rack.fenced)
        offset = self.rng.randrange(len(names))
        result = []
        for _ in range(num_partitions):
            taken: set[int] = set()
            first_rack = offset
            for step in range(len(names)):
                first_rack = (offset + step) % len(names)
                leader = racks[names[first_rack]].take_leader(taken)
                if leader >= 0:
                    break
            replicas = [leader]
            taken.add(leader)
            rack_index = first_rack + 1
            while len(replicas) < replication_factor:
                # Stripe over the racks after the leader's, wrapping round until filled.
                for step in range(len(names)):
                    broker = racks[names[(rack_index + step) % len(names)]].take_any(taken)
                    if broker >= 0:
                        rack_index = rack_index + step + 1
                        replicas.append(broker)
                        taken.add(broker)
                        break
            result.append(replicas)
            offset = (offset + 1) % len(names)
        return result
