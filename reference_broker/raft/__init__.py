"""KRaft: the replicated ``__cluster_metadata`` log and its election protocol.

``core`` is the sans-IO state machine (Kafka's KafkaRaftClient rules), ``log`` the replicated log
over a PartitionLog, ``serde`` the metadata record framing, ``quorum_state`` the persisted
election state.
"""

from reference_broker.raft.core import NotLeaderError, RaftCore, RaftTimeouts
from reference_broker.raft.messages import CommittedBatch, LeaderAndEpoch

__all__ = ["CommittedBatch", "LeaderAndEpoch", "NotLeaderError", "RaftCore", "RaftTimeouts"]
