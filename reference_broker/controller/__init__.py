"""The quorum controller (Kafka's KRaft controller) that runs on voter nodes of a cluster.

``quorum_controller`` holds the controller's state and operations without IO (the logic of
Kafka's QuorumController, ClusterControlManager, ReplicationControlManager and
ProducerIdControlManager: ``cluster_control``, ``replication_control``, ``partition_change``,
``placement``); ``service`` drives it from the node's raft client and answers the controller
APIs registered by ``handlers``. Nothing here runs on a single-node broker.
"""
