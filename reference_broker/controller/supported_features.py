"""The feature levels this software supports, as every node registers them (Kafka's
``QuorumFeatures.defaultSupportedFeatureMap`` and ``BrokerFeatures``).

Kafka 4.1's ranges for the features we implement. A feature whose highest level would be 0 is
left out, as Kafka leaves it out: eligible.leader.replicas.version (KIP-966) and share.version
(KIP-932) are not implemented here, so a node does not claim them and ``kafka-features upgrade``
of either is refused as by a Kafka node that does not know the feature.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from reference_broker.raft.voter_set import SUPPORTED_KRAFT_VERSIONS

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"

#: name -> (lowest, highest) supported level; metadata.version runs 3.3-IV3 (7) .. 4.1-IV1 (27)
SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = MappingProxyType({
    METADATA_VERSION: (7, 27),
    KRAFT_VERSION: SUPPORTED_KRAFT_VERSIONS,  # the raft layer's own
    TRANSACTION_VERSION: (0, 2),
    GROUP_VERSION: (0, 1),
})
