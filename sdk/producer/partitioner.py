"""Choosing a partition for records sent without an explicit one.

``DefaultPartitioner`` is the Java client's built-in behaviour, so Python and Java producers put
a key on the same partition: ``(murmur2(key) & 0x7fffffff) % num_partitions`` for keyed records,
and for records without a key the uniform sticky strategy of KIP-794: keep filling one partition
until ``batch_size`` bytes went to it, then switch to another at random. Sticking makes batches
full (fewer, larger requests) while switching by bytes keeps the load even.

Any callable ``(key_bytes, all_partitions, available_partitions) -> int`` (aiokafka's signature)
is accepted as well.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from sdk.errors import ConfigError
from sdk.records import murmur2

__all__ = [
    "CallablePartitioner",
    "DefaultPartitioner",
    "Murmur2RandomPartitioner",
    "Partitioner",
    "RoundRobinPartitioner",
    "make_partitioner",
]

PartitionerCallable = Callable[[bytes | None, Sequence[int], Sequence[int]], int]


def _murmur2_partition(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class Partitioner:
    """Base class for partitioners.

    ``all_partitions`` are the topic's partition ids in order; ``available_partitions`` those with
    a leader right now (may be empty). ``tracks_appends`` asks the producer to report the bytes
    appended for keyless records it placed, through ``record_appended``.
    """

    tracks_appends: bool = False

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        raise NotImplementedError

    def record_appended(self, topic: str, partition: int, size: int) -> None:
        """``size`` bytes of a keyless record were appended to ``partition``."""

    def partition_keyless(
        self, topic: str, all_partitions: Sequence[int], available_partitions: Sequence[int], size: int
    ) -> int:
        """Partition for a record without a key that will add ``size`` bytes; the producer's
        entry point, so a partitioner can choose and account in one call."""
        partition = self.partition(topic, None, all_partitions, available_partitions)
        if self.tracks_appends:
            self.record_appended(topic, partition, size)
        return partition


class _Sticky:
    """The partition keyless records of a topic stick to, and the bytes they brought it so far."""

    __slots__ = ("available", "partition", "produced", "used_up")

    def __init__(self, partition: int, available: Sequence[int]):
        self.partition = partition
        self.produced = 0
        self.used_up = False
        self.available = available


class DefaultPartitioner(Partitioner):
    """Java's built-in partitioner: murmur2 for keys, uniform sticky (KIP-794) without."""

    tracks_appends = True

    def __init__(self, batch_size: int = 16384):
        self.batch_size = batch_size
        self._sticky: dict[str, _Sticky] = {}

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        if key is not None:
            return all_partitions[_murmur2_partition(key, len(all_partitions))]
        sticky = self._sticky.get(topic)
        if sticky is None:
            return self._switch(topic, None, all_partitions, available_partitions)
        if sticky.used_up:
            return self._switch(topic, sticky.partition, all_partitions, available_partitions)
        # A new metadata snapshot is a new tuple: the identity test avoids a scan per record.
        if sticky.available is not available_partitions:
            if available_partitions and sticky.partition not in available_partitions:
                return self._switch(topic, sticky.partition, all_partitions, available_partitions)
            sticky.available = available_partitions
        return sticky.partition

    def sticky(self, topic: str) -> _Sticky | None:
        """The topic's sticky state, for the producer's fast path (see ``RecordAccumulator.try_append``):
        while ``used_up`` is false it may append to ``partition`` and add the bytes to
        ``produced``, setting ``used_up`` once ``produced`` reaches ``batch_size``, exactly as
        ``partition_keyless`` would."""
        return self._sticky.get(topic)

    def _switch(
        self, topic: str, previous: int | None, all_partitions: Sequence[int], available: Sequence[int]
    ) -> int:
        old = self._sticky.get(topic)
        if old is not None:
            old.used_up = True  # retired: whoever holds it (a producer's route) must ask again
        choices = available or all_partitions
        if previous is not None and len(choices) > 1:
            # Uniform over the other partitions: moving on is the point of switching.
            choice = choices[random.randrange(len(choices) - 1)]
            if choice == previous:
                choice = choices[-1]
        else:
            choice = choices[random.randrange(len(choices))]
        self._sticky[topic] = _Sticky(choice, available)
        return choice

    def record_appended(self, topic: str, partition: int, size: int) -> None:
        sticky = self._sticky.get(topic)
        if sticky is None or sticky.partition != partition:
            return
        sticky.produced += size
        if sticky.produced >= self.batch_size:
            sticky.used_up = True

    def partition_keyless(
        self, topic: str, all_partitions: Sequence[int], available_partitions: Sequence[int], size: int
    ) -> int:
        # The per-record hot path: choose and account in one call. The common case (same
        # metadata snapshot, budget left) is tested first and touches only the byte count.
        sticky = self._sticky.get(topic)
        if sticky is None or sticky.used_up or sticky.available is not available_partitions:
            if (
                sticky is None
                or sticky.used_up
                or (available_partitions and sticky.partition not in available_partitions)
            ):
                previous = None if sticky is None else sticky.partition
                self._switch(topic, previous, all_partitions, available_partitions)
                sticky = self._sticky[topic]
            else:
                sticky.available = available_partitions
        produced = sticky.produced + size
        sticky.produced = produced
        if produced >= self.batch_size:
            sticky.used_up = True
        return sticky.partition

    def __repr__(self) -> str:
        return f"DefaultPartitioner(batch_size={self.batch_size})"


class RoundRobinPartitioner(Partitioner):
    """Each record to the next available partition in turn, keys ignored (Java's
    RoundRobinPartitioner): even spread, small batches."""

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        n = self._counters.get(topic, 0)
        self._counters[topic] = n + 1
        choices = available_partitions or all_partitions
        return choices[n % len(choices)]


class Murmur2RandomPartitioner(Partitioner):
    """librdkafka's ``murmur2_random``: murmur2 for keys (same as Java), a random partition for
    each record without a key."""

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        if key is not None:
            return all_partitions[_murmur2_partition(key, len(all_partitions))]
        choices = available_partitions or all_partitions
        return choices[random.randrange(len(choices))]


class CallablePartitioner(Partitioner):
    """Adapts an aiokafka-style callable ``(key_bytes, all_partitions, available_partitions)``."""

    def __init__(self, func: PartitionerCallable):
        self.func = func

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        return self.func(key, list(all_partitions), list(available_partitions))

    def __repr__(self) -> str:
        return f"CallablePartitioner({self.func!r})"


_BY_NAME: dict[str, Callable[[int], Partitioner]] = {
    "default": DefaultPartitioner,
    "murmur2_random": lambda _batch_size: Murmur2RandomPartitioner(),
    "round_robin": lambda _batch_size: RoundRobinPartitioner(),
}


def make_partitioner(spec: Any, batch_size: int) -> Partitioner:
    """The partitioner for the ``partitioner`` setting: None/name/instance/callable."""
    if spec is None:
        return DefaultPartitioner(batch_size)
    if isinstance(spec, str):
        factory = _BY_NAME.get(spec)
        if factory is None:
            raise ConfigError("partitioner", f"unknown partitioner {spec!r}; one of {sorted(_BY_NAME)}")
        return factory(batch_size)
    if isinstance(spec, Partitioner):
        return spec
    if isinstance(spec, type) and issubclass(spec, Partitioner):
        return spec(batch_size) if spec is DefaultPartitioner else spec()
    if callable(spec):
        return CallablePartitioner(spec)
    raise ConfigError("partitioner", f"expected a name, a Partitioner or a callable, got {spec!r}")
