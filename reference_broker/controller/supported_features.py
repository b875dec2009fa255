"""The feature levels this node supports: what it registers with the active controller.

One table for every node of the cluster: a broker's BrokerRegistration and a controller's
ControllerRegistration (KIP-919) both send ``SUPPORTED_FEATURES``, and the controller checks
finalized levels (UpdateFeatures, a registering node's metadata.version) against what the
registrations in the image say. The ranges are Kafka 4.1.1's, so a mixed cluster agrees:

- ``metadata.version`` 7-27: 3.3-IV3 (the first KRaft production level) .. 4.1-IV1.
- ``kraft.version`` 0-1: 1 is KIP-853's dynamic quorum (VotersRecord in the log).
- ``transaction.version`` 0-2: 2 is KIP-890's server-side defense.
- ``group.version`` 0-1: 1 enables KIP-848's consumer group protocol.

Invariants: every range is ``(min, max)`` with ``min <= max``; a feature whose max supported
level would be 0 is not listed (Kafka leaves out features the node supports only at level 0,
e.g. eligible.leader.replicas.version and share.version, which we do not implement).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from reference_broker.raft.voter_set import SUPPORTED_KRAFT_VERSIONS

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"

#: metadata.version 3.7-IV0: the first level at which controllers register (KIP-919).
CONTROLLER_REGISTRATION_LEVEL = 15

#: feature name -> (min supported level, max supported level)
SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = MappingProxyType({
    METADATA_VERSION: (7, 27),
    KRAFT_VERSION: SUPPORTED_KRAFT_VERSIONS,  # the raft layer's own
    TRANSACTION_VERSION: (0, 2),
    GROUP_VERSION: (0, 1),
})

__all__ = [
    "CONTROLLER_REGISTRATION_LEVEL",
    "GROUP_VERSION",
    "KRAFT_VERSION",
    "METADATA_VERSION",
    "SUPPORTED_FEATURES",
    "TRANSACTION_VERSION",
]
