"""Per-partition checkpoint file: log start offset, recovery point and (replicated) high watermark.

``partition.checkpoint`` (JSON, replaced atomically) plays the role of Kafka's per-directory
``log-start-offset-checkpoint`` and ``recovery-point-offset-checkpoint``, and for a replicated
partition of ``replication-offset-checkpoint`` (the high watermark, written when it changed at the
next periodic flush; a stale value is safe: it only moves forward, and a replica starts from it
rather than from the log start). ``.clean_shutdown`` marks a partition closed cleanly (its files
can be trusted without validation).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from reference_broker.log._files import atomic_write

log = logging.getLogger("reference_broker.log")

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
CHECKPOINT_FILE = "partition.checkpoint"
#: Written by the log cleaner (``cleaner``); its presence also says segments may have offset gaps.
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"


@dataclass
class Checkpoint:
    log_start_offset: int = 0
    recovery_point: int = 0
    #: None for a partition that is not replicated (a single node's: it follows the log end)
    high_watermark: int | None = None

    @classmethod
    def read(cls, directory: Path) -> Checkpoint:
        try:
            data = json.loads((directory / CHECKPOINT_FILE).read_text())
            hw = data.get("high_watermark")
            return cls(int(data["log_start_offset"]), int(data["recovery_point"]),
                       None if hw is None else int(hw))
        except FileNotFoundError:
            return cls()
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable %s: %s", directory / CHECKPOINT_FILE, exc)
            return cls()

    def write(self, directory: Path, *, sync: bool = True) -> None:
        """Replace the checkpoint file (``sync=False``: no fsync, for a partition being created)."""
        body = {"version": 1, "log_start_offset": self.log_start_offset,
                "recovery_point": self.recovery_point}
        if self.high_watermark is not None:
            body["high_watermark"] = self.high_watermark
        atomic_write(directory / CHECKPOINT_FILE, json.dumps(body).encode(), sync=sync)
