"""Partitioners without a broker (the comparison with confluent-kafka is in test_producer.py)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from sdk.errors import ConfigError
from sdk.producer.partitioner import (
    CallablePartitioner,
    DefaultPartitioner,
    Murmur2RandomPartitioner,
    RoundRobinPartitioner,
    make_partitioner,
)
from sdk.records import murmur2

ALL = (0, 1, 2, 3, 4, 5)


def test_keyed_records_use_java_murmur2():
    partitioner = DefaultPartitioner()
    for key in (b"", b"a", b"hello world", bytes(range(200))):
        assert partitioner.partition("t", key, ALL, ALL) == (murmur2(key) & 0x7FFFFFFF) % 6
    # Known values from the Java client (Utils.murmur2).
    assert murmur2(b"21") == -973932308
    assert murmur2(b"") == 275646681


def test_keys_ignore_availability():
    partitioner = DefaultPartitioner()
    expected = partitioner.partition("t", b"key", ALL, ALL)
    assert partitioner.partition("t", b"key", ALL, (0,)) == expected


def test_sticky_switches_after_batch_size_bytes():
    partitioner = DefaultPartitioner(batch_size=1000)
    runs = []
    for _ in range(60):
        p = partitioner.partition("t", None, ALL, ALL)
        partitioner.record_appended("t", p, 100)
        if not runs or runs[-1][0] != p:
            runs.append([p, 0])
        runs[-1][1] += 1
    assert all(count == 10 for _, count in runs)
    assert all(a[0] != b[0] for a, b in itertools.pairwise(runs))


def test_sticky_prefers_available_partitions():
    partitioner = DefaultPartitioner(batch_size=100)
    chosen = set()
    for _ in range(200):
        p = partitioner.partition("t", None, ALL, (2, 4))
        partitioner.record_appended("t", p, 100)
        chosen.add(p)
    assert chosen == {2, 4}
    # The sticky partition lost its leader: move at once.
    sticky = partitioner.partition("t", None, ALL, (2, 4))
    assert partitioner.partition("t", None, ALL, (sticky ^ 6,)) == sticky ^ 6


def test_round_robin_and_murmur2_random():
    rr = RoundRobinPartitioner()
    assert [rr.partition("t", b"same", ALL, ALL) for _ in range(8)] == [0, 1, 2, 3, 4, 5, 0, 1]
    assert [rr.partition("u", None, ALL, (1, 3)) for _ in range(3)] == [1, 3, 1]
    mr = Murmur2RandomPartitioner()
    assert mr.partition("t", b"k", ALL, ALL) == DefaultPartitioner().partition("t", b"k", ALL, ALL)
    spread = Counter(mr.partition("t", None, ALL, ALL) for _ in range(600))
    assert set(spread) == set(ALL)


def test_make_partitioner_accepts_names_instances_and_callables():
    assert isinstance(make_partitioner(None, 10), DefaultPartitioner)
    assert make_partitioner(None, 10).batch_size == 10
    assert isinstance(make_partitioner("round_robin", 10), RoundRobinPartitioner)
    instance = RoundRobinPartitioner()
    assert make_partitioner(instance, 10) is instance
    wrapped = make_partitioner(lambda key, all_, avail: all_[-1], 10)
    assert isinstance(wrapped, CallablePartitioner)
    assert wrapped.partition("t", None, ALL, ALL) == 5
    with pytest.raises(ConfigError):
        make_partitioner("sticky?", 10)
