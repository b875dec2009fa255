"""The settings the quorum controller acts on, read once from the node's configuration."""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_broker.log.config import LogConfig

#: Kafka 4.1's metadata.version (4.1-IV1), finalized by the first active controller.
METADATA_VERSION_LEVEL = 27
#: Producer ids handed to a broker per AllocateProducerIds (Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE).
PRODUCER_ID_BLOCK_SIZE = 1000


@dataclasses.dataclass(frozen=True)
class ControllerSettings:
    node_id: int
    cluster_id: str = ""
    session_timeout_ms: int = 9000
    default_replication_factor: int = 1
    default_num_partitions: int = 1
    unclean_leader_election: bool = False
    delete_topic_enable: bool = True
    auto_leader_rebalance: bool = True
    leader_imbalance_check_interval_s: int = 300
    #: The log defaults topic configs are checked on top of (Kafka's controller validates with
    #: its own static log config).
    log_defaults: LogConfig = dataclasses.field(default_factory=LogConfig)
    #: The node's static broker config (no dynamic layers): what broker config changes are
    #: checked against (a ``BrokerConfig``; None: Kafka's defaults).
    static_config: Any = None
    #: the transaction.version a new cluster is bootstrapped with (Kafka sets it when formatting
    #: the storage; afterwards only UpdateFeatures changes it)
    transaction_version: int = 2

    @property
    def stale_broker_check_interval_s(self) -> float:
        """How often the active controller looks for expired broker sessions: Kafka's periodic
        fencing task runs eight times per session timeout (at least every millisecond apart), so a
        dead broker is fenced within 112.5% of ``broker.session.timeout.ms``."""
        return max(1, self.session_timeout_ms / 8) / 1000

    @classmethod
    def from_config(cls, config: Any, cluster_id: str) -> ControllerSettings:
        """Read from a ``BrokerConfig``; keys another part has not declared yet keep Kafka's default."""

        def get(key: str, default: Any) -> Any:
            try:
                return config.get(key)
            except KeyError:  # a key another part of the cluster declares, not (yet) in this build
                return default

        return cls(
            node_id=config.node_id,
            cluster_id=cluster_id,
            session_timeout_ms=get("broker.session.timeout.ms", 9000),
            default_replication_factor=get("default.replication.factor", 1),
            default_num_partitions=get("num.partitions", 1),
            unclean_leader_election=get("unclean.leader.election.enable", False),
            delete_topic_enable=get("delete.topic.enable", True),
            transaction_version=get("transaction.version", 2),
            auto_leader_rebalance=get("auto.leader.rebalance.enable", True),
            leader_imbalance_check_interval_s=get("leader.imbalance.check.interval.seconds", 300),
            log_defaults=config.log_config(),
            static_config=type(config)(data_dir=config.data_dir, settings=config.settings),
        )
