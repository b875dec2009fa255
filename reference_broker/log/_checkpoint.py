"""Per-partition checkpoint file: log start offset and recovery point.

``partition.checkpoint`` (JSON, replaced atomically) plays the role of Kafka's per-directory
``log-start-offset-checkpoint`` and ``recovery-point-offset-checkpoint``; ``.clean_shutdown``
marks a partition closed cleanly (its files can be trusted without validation).
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

    @classmethod
    def read(cls, directory: Path) -> Checkpoint:
        try:
            data = json.loads((directory / CHECKPOINT_FILE).read_text())
            return cls(int(data["log_start_offset"]), int(data["recovery_point"]))
        except FileNotFoundError:
            return cls()
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable %s: %s", directory / CHECKPOINT_FILE, exc)
            return cls()

    def write(self, directory: Path, *, sync: bool = True) -> None:
        """Replace the checkpoint file (``sync=False``: no fsync, for a partition being created)."""
        body = {"version": 1, "log_start_offset": self.log_start_offset,
                "recovery_point": self.recovery_point}
        atomic_write(directory / CHECKPOINT_FILE, json.dumps(body).encode(), sync=sync)
