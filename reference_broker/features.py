"""The feature levels a node finalizes and supports (KIP-584): one place that ApiVersions (on
client and controller listeners alike) and the parts that act on a level read.

A single node finalizes ``transaction.version`` from its ``transaction.version`` setting and
``group.version`` 1 (it serves KIP-848's consumer groups), and never changes them while it runs
(epoch 0). A cluster node finalizes what its metadata image
holds (FeatureLevelRecords: metadata.version, transaction.version, group.version, written when
the cluster was bootstrapped and by UpdateFeatures) and the raft layer's kraft.version; the
epoch is the image's offset, as Kafka's nodes report it, so a client can tell a newer answer.

Invariants: a level 0 is not listed as finalized (Kafka removes the feature); the supported
ranges are the ones the node registered (``controller.supported_features``), and an ApiVersions
answer below v4 reports none starting at 0 (KIP-1022: older clients read 0 as "absent").
"""

from __future__ import annotations

from typing import Any

from reference_broker.controller.supported_features import (
    GROUP_VERSION,
    KRAFT_VERSION,
    SUPPORTED_FEATURES,
    TRANSACTION_VERSION,
)
from sdk.protocol.messages import ApiVersionsResponse


def _single_node_levels(broker: Any) -> dict[str, int]:
    level = broker.config.get(TRANSACTION_VERSION)
    return ({TRANSACTION_VERSION: level} if level > 0 else {}) | {GROUP_VERSION: 1}


def _kraft_version(broker: Any) -> int:
    raft = getattr(broker, "raft", None)
    return 0 if raft is None or raft.core is None else int(raft.core.kraft_version)


def finalized_levels(broker: Any) -> tuple[dict[str, int], int]:
    """The finalized levels by feature name (levels above 0 only) and their epoch."""
    loader = getattr(broker, "metadata_loader", None)
    if loader is None:  # a single node
        return _single_node_levels(broker), 0
    image = loader.image
    levels = {name: level for name, level in image.features.items() if level > 0}
    if (kraft := _kraft_version(broker)) > 0:
        levels[KRAFT_VERSION] = kraft
    return levels, max(image.offset, 0)


def finalized_level(broker: Any, name: str) -> int:
    """The finalized level of ``name`` (0 when not finalized); read per request (the produce
    path asks for transaction.version), so it looks up the one feature only."""
    loader = getattr(broker, "metadata_loader", None)
    if loader is None:
        return _single_node_levels(broker).get(name, 0)
    if name == KRAFT_VERSION:
        return _kraft_version(broker)
    return int(loader.image.features.get(name, 0))


def supported_ranges(broker: Any) -> dict[str, tuple[int, int]]:
    """What the node supports: a cluster node what it registers, a single node the features it
    finalizes."""
    if getattr(broker, "metadata_loader", None) is None:
        return {name: SUPPORTED_FEATURES[name] for name in (TRANSACTION_VERSION, GROUP_VERSION)}
    return dict(SUPPORTED_FEATURES)


def api_versions_fields(broker: Any, version: int) -> dict[str, Any]:
    """ApiVersions v3+'s supported_features, finalized_features_epoch and finalized_features."""
    R = ApiVersionsResponse
    levels, epoch = finalized_levels(broker)
    return {
        "supported_features": [
            R.SupportedFeatureKey(
                name=name, min_version=low if version >= 4 else max(low, 1), max_version=high)
            for name, (low, high) in sorted(supported_ranges(broker).items())
        ],
        "finalized_features_epoch": epoch,
        "finalized_features": [
            R.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
            for name, level in sorted(levels.items())
        ],
    }
