"""The cleaner's key map: a fixed-size table whose memory does not follow the keys' size or number,
full at ``slots * load factor`` keys as Kafka's SkimpyOffsetMap; and the broker keys sizing it."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest

from reference_broker.config import BrokerConfig, ConfigError
from reference_broker.log.config import INT_MAX, LogConfig
from reference_broker.log.offset_map import ENTRY_BYTES, KeyOffsetMap

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


def test_each_key_maps_to_its_latest_offset_and_unknown_keys_to_minus_one() -> None:
    rng = random.Random(7)
    offsets = KeyOffsetMap(64 * 1024)
    expected: dict[bytes, int] = {}
    keys = [rng.randbytes(rng.randint(0, 40)) for _ in range(1_500)]
    for offset in range(3_000):
        key = rng.choice(keys)
        offsets.put(key, offset)
        expected[key] = offset
    assert len(offsets) == len(expected)
    assert all(offsets.get(key) == offset for key, offset in expected.items())
    assert offsets.get(b"never put") == -1
    assert offsets.latest_offset == 2_999


def test_the_table_takes_the_configured_bytes_whatever_the_keys() -> None:
    memory = MIB
    tracemalloc.start()
    try:
        offsets = KeyOffsetMap(memory)
        before, _ = tracemalloc.get_traced_memory()
        for i in range(10_000):  # 10,000 distinct keys of 4 KiB: 40 MiB of keys
            offsets.put(i.to_bytes(4, "big") * 1024, i)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(offsets) == 10_000
    assert offsets.memory_bytes <= memory
    assert after - before < 16 * 1024  # nothing kept per key


def test_it_is_full_at_slots_times_the_load_factor_and_refuses_new_keys_then() -> None:
    offsets = KeyOffsetMap(100 * ENTRY_BYTES, 0.5)
    assert offsets.capacity == 50
    for i in range(50):
        assert not offsets.full
        offsets.put(b"key-%d" % i, i)
    assert offsets.full
    offsets.put(b"key-3", 60)  # a key already in the map still moves on
    assert offsets.get(b"key-3") == 60
    with pytest.raises(ValueError, match="full"):
        offsets.put(b"another key", 61)
    assert all(offsets.get(b"key-%d" % i) == (60 if i == 3 else i) for i in range(50))


def test_a_map_for_few_keys_takes_less_memory_but_fills_as_the_configured_one() -> None:
    small = KeyOffsetMap(128 * MIB, max_keys=10)
    assert small.memory_bytes < 1024
    assert small.capacity >= 10
    bounded = KeyOffsetMap(100 * ENTRY_BYTES, 0.9, max_keys=1_000)
    assert bounded.memory_bytes <= 100 * ENTRY_BYTES
    assert bounded.capacity == 90


@pytest.mark.parametrize(("memory", "load_factor"), [(ENTRY_BYTES, 0.9), (MIB, 0.0), (MIB, 1.5)])
def test_impossible_sizes_are_refused(memory: int, load_factor: float) -> None:
    with pytest.raises(ValueError, match="key map"):
        KeyOffsetMap(memory, load_factor)


def test_broker_keys_size_each_cleaner_thread_s_map() -> None:
    config = LogConfig.from_broker_properties({
        "log.cleaner.dedupe.buffer.size": 8 * MIB, "log.cleaner.threads": 4,
        "log.cleaner.io.buffer.load.factor": 0.75})
    assert config.cleaner_dedupe_buffer_bytes_per_thread == 2 * MIB
    assert config.cleaner_dedupe_buffer_load_factor == 0.75
    defaults = LogConfig.from_broker_properties({})
    assert defaults.cleaner_dedupe_buffer_bytes_per_thread == 128 * MIB
    assert defaults.cleaner_dedupe_buffer_load_factor == 0.9
    huge = LogConfig.from_broker_properties({"log.cleaner.dedupe.buffer.size": 8 << 30})
    assert huge.cleaner_dedupe_buffer_bytes_per_thread == INT_MAX  # Kafka's 2 GiB cap a thread


def test_the_broker_refuses_a_map_of_1_mib_or_less_a_thread(tmp_path: Path) -> None:
    BrokerConfig.build(tmp_path, properties={"log.cleaner.dedupe.buffer.size": MIB + 1})
    for props in ({"log.cleaner.dedupe.buffer.size": MIB},
                  {"log.cleaner.dedupe.buffer.size": 4 * MIB, "log.cleaner.threads": 4},
                  {"log.cleaner.io.buffer.load.factor": 0}):
        with pytest.raises(ConfigError, match=r"log\.cleaner\."):
            BrokerConfig.build(tmp_path, properties=props)
    BrokerConfig.build(tmp_path, properties={"log.cleaner.dedupe.buffer.size": MIB,
                                             "log.cleaner.threads": 0})
