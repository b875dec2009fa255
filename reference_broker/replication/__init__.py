"""Partition replication across the brokers of a cluster (cluster mode only).

* :class:`~reference_broker.replication.partition.Partition`: one partition's leader/follower
  state, the followers' fetch states, the high watermark and ISR rules, acks=all waits.
* :class:`~reference_broker.replication.fetcher.ReplicaFetcher`: a follower's fetch loop against
  one leader (append, truncate on a diverging epoch, high watermark from the leader).
* :mod:`~reference_broker.replication.leader_fetch`: the leader's answer to a follower's Fetch.
* :class:`~reference_broker.replication.replica_manager.ReplicaManager`: the partitions of this
  broker; ``become_leader`` / ``become_follower`` / ``stop_replica`` for the metadata publisher.

A single node has no replica manager (``broker.replica_manager`` is None) and none of this runs.
"""

from reference_broker.replication.config import ReplicationConfig
from reference_broker.replication.fetcher import ReplicaFetcher
from reference_broker.replication.partition import (
    AlterPartitionSender,
    FollowerState,
    IsrCommitted,
    IsrProposal,
    Partition,
)
from reference_broker.replication.replica_manager import ReplicaManager

__all__ = ["AlterPartitionSender", "FollowerState", "IsrCommitted", "IsrProposal", "Partition",
           "ReplicaFetcher", "ReplicaManager", "ReplicationConfig"]
