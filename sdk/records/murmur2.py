"""Kafka's murmur2 hash, bit-for-bit the Java client's ``Utils.murmur2``.

The default partitioner of every Kafka client maps a keyed record to
``(murmur2(key) & 0x7fffffff) % partitions``; matching Java exactly is what lets a Python producer
and a Java producer put the same key on the same partition.
"""

from __future__ import annotations

import struct

from sdk.records.varint import BytesLike

__all__ = ["murmur2", "murmur2_partition"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: BytesLike) -> int:
    """32-bit murmur2 of ``data`` as Java computes it: seed 0x9747b28c, signed int32 result."""
    length = len(data)
    m = _M
    mask = _MASK
    h = (_SEED ^ length) & mask
    n4 = length >> 2
    if n4:
        # Java reads each 4-byte group little-endian.
        for k in struct.unpack_from(f"<{n4}I", data):
            k = (k * m) & mask
            k ^= k >> _R
            k = (k * m) & mask
            h = ((h * m) & mask) ^ k
    tail = length & 3
    base = length & ~3
    # The Java switch falls through from case 3 to case 1.
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def murmur2_partition(key: BytesLike, num_partitions: int) -> int:
    """Partition for ``key`` under Kafka's default (and sticky) partitioner."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
