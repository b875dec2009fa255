"""The cleaner's key map: for each key of the dirty range, the offset of its latest record.

Kafka's ``SkimpyOffsetMap`` stores MD5 digests of keys in a fixed buffer
(``log.cleaner.dedupe.buffer.size``); this one stores the keys themselves in a dict, so two keys
never collide and the map is never full (it holds one entry per distinct key of the dirty range).
``latest_offset`` is the last offset the map covers: records after it are not judged by the map
(Kafka's ``OffsetMap.latestOffset``).
"""

from __future__ import annotations

__all__ = ["KeyOffsetMap"]


class KeyOffsetMap:
    """Key -> offset of its latest record in the mapped range, plus the range's last offset."""

    __slots__ = ("_offsets", "latest_offset")

    def __init__(self) -> None:
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        """Record that ``key`` has a record at ``offset`` (later puts win: offsets only grow)."""
        self._offsets[key] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """Offset of ``key``'s latest mapped record, -1 when the key is not mapped."""
        return self._offsets.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        """Extend the covered range to ``offset`` (a range may end in batches without keys)."""
        if offset > self.latest_offset:
            self.latest_offset = offset

    def __len__(self) -> int:
        return len(self._offsets)
