"""murmur2 must be bit-identical to the Java client's Utils.murmur2."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.records import murmur2, murmur2_partition

from .oracles import kafka_python_murmur2

# Vectors from Kafka's UtilsTest.testMurmur2 (the Java client's expected signed ints).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), list(JAVA_VECTORS.items()))
def test_java_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    # kafka-python returns the same 32 bits, unsigned.
    assert kafka_python_murmur2(data) == expected & 0xFFFFFFFF


def test_every_tail_length() -> None:
    data = bytes(range(1, 40))
    for n in range(len(data)):
        assert murmur2(data[:n]) & 0xFFFFFFFF == kafka_python_murmur2(data[:n]), n


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_matches_kafka_python(data: bytes) -> None:
    value = murmur2(data)
    assert -(2**31) <= value < 2**31
    assert value & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert murmur2(bytearray(data)) == murmur2(memoryview(data)) == value


def test_partition() -> None:
    # (murmur2 & 0x7fffffff) % n, as Java's Utils.toPositive(murmur2(key)) % numPartitions
    assert murmur2_partition(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10
    for key in JAVA_VECTORS:
        for n in (1, 3, 12, 1000):
            assert 0 <= murmur2_partition(key, n) < n
    with pytest.raises(ValueError):
        murmur2_partition(b"k", 0)
