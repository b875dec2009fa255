"""The bootstrap checkpoint of a dynamic quorum, as Kafka's ``kafka-storage format`` writes it.

``--standalone`` or ``--initial-controllers`` write ``00000000000000000000-0000000000.checkpoint``
(Kafka's ``Snapshots.BOOTSTRAP_SNAPSHOT_ID``, end offset 0, epoch 0) in ``__cluster_metadata-0``:
a SnapshotHeaderRecord, KRaftVersionRecord(1), the initial VotersRecord and the footer. The raft
core reads its voter set from it, so a formatted node knows the initial voters before any log
entry exists. ``--no-initial-controllers`` writes no checkpoint: the node starts as an observer
and learns the voters from the leader's log.
"""

from __future__ import annotations

from pathlib import Path

from reference_broker.raft.log import PARTITION_DIR
from reference_broker.raft.snapshot import SnapshotId, SnapshotWriter, snapshot_path
from reference_broker.raft.voter_set import VoterSet
from sdk.protocol.messages import KRaftVersionRecord

#: Kafka's ``Snapshots.BOOTSTRAP_SNAPSHOT_ID``
BOOTSTRAP_SNAPSHOT_ID = SnapshotId(0, 0)


def bootstrap_checkpoint_path(metadata_log_dir: Path) -> Path:
    return snapshot_path(Path(metadata_log_dir) / PARTITION_DIR, BOOTSTRAP_SNAPSHOT_ID)


def write_bootstrap_checkpoint(metadata_log_dir: Path, voters: VoterSet, *,
                               timestamp_ms: int = 0) -> Path:
    """Write the bootstrap checkpoint of ``voters`` (kraft.version 1) unless one exists; its
    path. An existing checkpoint is kept: formatting twice must not change the voters."""
    path = bootstrap_checkpoint_path(metadata_log_dir)
    if path.exists():
        return path
    if not voters.ids:
        raise ValueError("a bootstrap checkpoint needs at least one initial voter")
    writer = SnapshotWriter(path.parent, BOOTSTRAP_SNAPSHOT_ID, timestamp_ms)
    writer.control = [KRaftVersionRecord(version=0, k_raft_version=1), voters.to_record()]
    return writer.freeze()
