"""Producer id allocation for InitProducerId, never reusing an id across restarts.

Ids are handed out from blocks, like Kafka's controller does with AllocateProducerIds: before the
first id of a block is used, the end of that block is written durably to ``producer_ids``, so after
a crash the broker starts at the next unwritten block. At most one block of ids is skipped per
restart; none is ever handed out twice, which an idempotent producer's sequence state relies on.
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK_SIZE = 1000
FILE_NAME = "producer_ids"


class ProducerIdManager:
    """Hands out producer ids; ``next_id()`` is called on the event loop (one fsync per block)."""

    def __init__(self, data_dir: Path, block_size: int = BLOCK_SIZE):
        self.path = Path(data_dir) / FILE_NAME
        self.block_size = block_size
        self._next = self._load()
        self._block_end = self._next  # nothing reserved yet in this run

    def _load(self) -> int:
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return 0
        try:
            value = int(text)
        except ValueError:
            raise RuntimeError(f"{self.path} is corrupt ({text!r}); refusing to risk reusing ids") from None
        if value < 0:
            raise RuntimeError(f"{self.path} holds a negative producer id block ({value})")
        return value

    def _reserve_block(self) -> None:
        end = self._next + self.block_size
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{end}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._block_end = end

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._reserve_block()
        pid = self._next
        self._next += 1
        return pid
