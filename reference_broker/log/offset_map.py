"""The cleaner's key map: for each key of the dirty range, the offset of its latest record.

Its memory is fixed when it is made, whatever the keys' sizes or number, as Kafka's
``SkimpyOffsetMap`` (``log.cleaner.dedupe.buffer.size`` split between ``log.cleaner.threads``): a
table of ``memory // 24`` slots in one ``bytearray``, each slot the 16-byte MD5 digest of a key
(Kafka's ``log.cleaner.hash.algorithm``) and the 8-byte offset of its latest record, with open
addressing (double hashing over a prime number of slots, so a probe sequence visits every slot).
The map is :attr:`full` once it holds ``slots * load_factor`` keys
(``log.cleaner.io.buffer.load.factor``): the cleaner then stops mapping and cleans only up to
:attr:`latest_offset`, the last offset the map covers (records after it are not judged by the
map, Kafka's ``OffsetMap.latestOffset``); the next pass goes on from there.

Invariant accepted from Kafka: two distinct keys with the same 128-bit digest are taken for one key,
so the older record of one of them could be removed. The chance of that is negligible (about
``keys**2 / 2**129`` per pass), and Kafka accepts the same risk.
"""

from __future__ import annotations

import hashlib
import math
import struct

__all__ = ["ENTRY_BYTES", "KeyOffsetMap"]

#: bytes a slot takes: the key's 16-byte digest and an 8-byte offset
ENTRY_BYTES = 24
_DIGEST_PAIR = struct.Struct("<QQ")
_EMPTY = 0  # the offset word of an empty slot (offsets are stored plus one)
_md5 = hashlib.md5


class KeyOffsetMap:
    """Key digest -> offset of its latest record in the mapped range, in a fixed-size table.

    ``memory``: the most bytes the table may take (at least two slots). ``load_factor``: the share
    of the slots it fills before it is full, in (0, 1]; one slot always stays empty, so a probe for
    a key not in the map ends. ``max_keys``: an upper bound on the distinct keys that will be put
    (the number of offsets of the range to map); the table is then made no larger than twice what
    that needs (probes stay short at half the load factor), so a small log does not take the whole
    configured memory, and the map becomes full exactly when a map of ``memory`` bytes would.
    """

    __slots__ = ("_buffer", "_size", "_table", "capacity", "latest_offset", "slots")

    def __init__(self, memory: int, load_factor: float = 0.9, *, max_keys: int | None = None) -> None:
        if not 0 < load_factor <= 1:
            raise ValueError(f"the key map's load factor must be in (0, 1], not {load_factor}")
        most = memory // ENTRY_BYTES
        if most < 2:
            raise ValueError(f"the key map needs at least {2 * ENTRY_BYTES} bytes, not {memory}")
        slots = _prime_at_most(most)
        if max_keys is not None:
            max_keys = max(max_keys, 0)
            needed = max(max_keys + 1, math.ceil(2 * max_keys / load_factor) + 1)
            if needed < slots:
                slots = _prime_at_least(needed)
        #: number of slots of the table
        self.slots = slots
        #: how many keys it holds once full (Kafka's ``slots * dupBufferLoadFactor``)
        self.capacity = max(1, min(int(most * load_factor), slots - 1))
        self._buffer = bytearray(slots * ENTRY_BYTES)  # zeroed: every slot empty
        # Three unsigned 64-bit words a slot: digest low half, digest high half, offset + 1.
        self._table = memoryview(self._buffer).cast("Q")
        self._size = 0
        #: the last offset the map covers (-1: none yet)
        self.latest_offset = -1

    @property
    def memory_bytes(self) -> int:
        """Bytes of the table (at most the ``memory`` it was made with)."""
        return len(self._buffer)

    @property
    def full(self) -> bool:
        """Whether it holds :attr:`capacity` keys: no more may be put (Kafka stops mapping)."""
        return self._size >= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        """Record that ``key`` has a record at ``offset`` (later puts win: offsets only grow).

        ValueError when a new key is put in a full map."""
        low, high = _DIGEST_PAIR.unpack(_md5(key, usedforsecurity=False).digest())
        table, slots = self._table, self.slots
        slot = low % slots
        step = high % (slots - 1) + 1
        while True:
            at = 3 * slot
            if table[at + 2] == _EMPTY:
                if self._size >= self.capacity:
                    raise ValueError(f"the key map is full ({self._size} keys of {self.slots} slots)")
                table[at] = low
                table[at + 1] = high
                table[at + 2] = offset + 1
                self._size += 1
                break
            if table[at] == low and table[at + 1] == high:
                table[at + 2] = offset + 1
                break
            slot += step
            if slot >= slots:
                slot -= slots
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """Offset of ``key``'s latest mapped record, -1 when the key is not mapped."""
        low, high = _DIGEST_PAIR.unpack(_md5(key, usedforsecurity=False).digest())
        table, slots = self._table, self.slots
        slot = low % slots
        step = high % (slots - 1) + 1
        while True:
            at = 3 * slot
            stored = table[at + 2]
            if stored == _EMPTY:
                return -1
            if table[at] == low and table[at + 1] == high:
                return stored - 1
            slot += step
            if slot >= slots:
                slot -= slots

    def update_latest_offset(self, offset: int) -> None:
        """Extend the covered range to ``offset`` (a range may end in batches without keys)."""
        if offset > self.latest_offset:
            self.latest_offset = offset

    def __len__(self) -> int:
        return self._size


def _prime_at_most(n: int) -> int:
    """The largest prime <= ``n`` (``n`` >= 2)."""
    while not _is_prime(n):
        n -= 1
    return n


def _prime_at_least(n: int) -> int:
    """The smallest prime >= ``n``."""
    while not _is_prime(n):
        n += 1
    return n


def _is_prime(n: int) -> bool:
    """Miller-Rabin with the first twelve primes as witnesses: exact below 3.3 * 10**24."""
    witnesses = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    if n < 2:
        return False
    for p in witnesses:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in witnesses:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True
