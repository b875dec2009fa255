"""Finalized features on the active controller: Kafka's FeatureControlManager.

UpdateFeatures (57), which brokers forward here, changes the cluster's finalized feature levels:
``metadata.version``, ``transaction.version`` and ``group.version`` become FeatureLevelRecords in
the metadata log; ``kraft.version`` is the raft layer's (its KRaftVersionRecord and the voter set
are control records of the metadata log), so an upgrade of it is handed to the raft leader
(``KRaftVersionAccessor``) and the operation writes a NoOpRecord, whose commit means the raft
records before it are committed too.

The checks, in Kafka's order, per feature: a known upgrade type; a level not below 0; a level this
controller, every registered broker and every registered controller supports (each quorum voter
must have registered as a controller); no lower level without a downgrade type, no higher one
with it; then metadata.version's own rule (a downgrade may not cross a level that changed the
metadata format) or kraft.version's (raft's checks; never downgraded). None of the features
supported here depends on another's level in Kafka 4.1 (eligible.leader.replicas.version, which
does, is not supported). The first feature to fail fails the request; the features are taken
in the order Kafka's HashMap iterates them, so the one named in the error is the one Kafka names.

Invariants: a request's FeatureLevelRecords are one batch (all applied or none); ``validate_only``
writes nothing; level 0 removes a feature (metadata.version is never removed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from reference_broker import internal_records as rec
from reference_broker.controller.result import ControllerResult
from reference_broker.controller.supported_features import (
    KRAFT_VERSION,
    METADATA_VERSION,
    SUPPORTED_FEATURES,
)
from sdk.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from reference_broker.controller.quorum_controller import QuorumController

#: the features Kafka 4.1 knows (Feature.PRODUCTION_FEATURES and metadata.version); level 0 of
#: one this node does not support is accepted, as on a Kafka node that supports none of it
KNOWN_FEATURES = frozenset({METADATA_VERSION, KRAFT_VERSION, "transaction.version", "group.version",
                            "eligible.leader.replicas.version", "share.version", "streams.version"})
#: Kafka's FeatureUpdate.UpgradeType codes
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
#: metadata.version levels that changed the metadata format (Kafka's MetadataVersion
#: ``didMetadataChange``, 3.3-IV3 .. 4.1-IV1): a downgrade across one could drop metadata
_METADATA_CHANGED = frozenset({7, 8, 11, 13, 14, 15, 17, 23})


class FeatureUpdateError(Exception):
    """A refusal with an error code and the message the client is given as it is."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class KRaftVersionAccessor(Protocol):
    """The raft layer's kraft.version (Kafka's KRaftVersionAccessor)."""

    def kraft_version(self) -> int: ...

    def voter_ids(self) -> frozenset[int]: ...

    def upgrade_kraft_version(self, version: int, validate_only: bool) -> None:
        """Append the upgrade (or only check it); raises ``FeatureUpdateError``, or
        ``ValueError`` for a check Kafka words as an invalid update version."""
        ...


def java_hash_order(names: Iterable[str]) -> list[str]:
    """``names`` (distinct) in the order a ``java.util.HashMap`` filled with them in this order
    iterates them: by bucket of the spread String hash code, then insertion order."""
    names = list(names)
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = 0
        data = name.encode("utf-16-be")  # String.hashCode runs over UTF-16 code units
        for i in range(0, len(data), 2):
            h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=bucket)  # sorted is stable: insertion order within a bucket


def _outside_range(who: str, level: int, supported: tuple[int, int] | None) -> str | None:
    """Kafka's QuorumFeatures.reasonNotSupported for one node's supported range."""
    low, high = supported if supported is not None else (0, 0)
    if low <= level <= high:
        return None
    if high == 0:
        return f"{who} does not support this feature."
    return f"{who} only supports versions {low}-{high}"


class FeatureControl:
    def __init__(self, controller: QuorumController):
        self.controller = controller
        #: the raft layer, set by the driver (``ControllerService``); None in unit tests of
        #: other operations, where kraft.version reads 0 and cannot be changed
        self.kraft: KRaftVersionAccessor | None = None

    def finalized(self) -> dict[str, int]:
        """The finalized levels: the image's features and the raft layer's kraft.version."""
        levels = dict(self.controller.image.features)
        if self.kraft is not None:
            levels[KRAFT_VERSION] = self.kraft.kraft_version()
        return levels

    def update_features(self, updates: list[tuple[str, int, int]], validate_only: bool) -> ControllerResult:
        """``updates``: (feature, level, upgrade type) in request order. The result's response is
        None on success, else the ``FeatureUpdateError`` of the first feature that failed."""
        wanted = {name: (level, kind) for name, level, kind in updates}
        current = self.finalized()
        records: list[Any] = []
        for name in java_hash_order(wanted):
            level, kind = wanted[name]
            try:
                records += self._update(name, level, kind, current.get(name, 0), validate_only)
            except FeatureUpdateError as error:
                return ControllerResult([], error)
        return ControllerResult([] if validate_only else records, None)

    def _update(self, name: str, level: int, kind: int, current: int, validate_only: bool) -> list[Any]:
        if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            raise _invalid(name, level, "The controller does not support the given upgrade type.")
        if level < 0:
            raise _invalid(name, level, "A feature version cannot be less than 0.")
        reason = self._reason_not_supported(name, level)
        if reason is not None:
            raise _invalid(name, level, reason)
        if level < current and kind == UPGRADE:
            raise _invalid(name, level, "Can't downgrade the version of this feature without setting"
                           " the upgrade type to either safe or unsafe downgrade.")
        if level > current and kind != UPGRADE:
            raise _invalid(name, level, "Can't downgrade to a newer version.")
        if name == METADATA_VERSION:
            return [self._metadata_version(level, current, kind == UNSAFE_DOWNGRADE)]
        if name == KRAFT_VERSION:
            return self._kraft_version(level, current, kind, validate_only)
        if name not in KNOWN_FEATURES:  # level 0 of a feature nobody knows
            raise _invalid(name, level, f"Feature {name} not found.")
        return [rec.FeatureLevelRecord(name=name, feature_level=level)]

    def _reason_not_supported(self, name: str, level: int) -> str | None:
        """This controller's range, then every registered broker's, then every registered
        controller's; a voter that never registered as a controller may not support it."""
        node_id = self.controller.settings.node_id
        reason = _outside_range(f"Local controller {node_id}", level, SUPPORTED_FEATURES.get(name))
        if reason is not None:
            return reason
        image = self.controller.image
        for broker in sorted(image.brokers.values(), key=lambda b: b.id):
            reason = _outside_range(f"Broker {broker.id}", level, broker.features.get(name))
            if reason is not None:
                return reason
        controllers = image.controllers
        for controller in sorted(controllers.values(), key=lambda c: c.id):
            if controller.id == node_id:
                continue
            reason = _outside_range(f"Controller {controller.id}", level,
                                           controller.features.get(name))
            if reason is not None:
                return reason
        voters = self.kraft.voter_ids() if self.kraft is not None else frozenset()
        for voter in sorted(voters):
            if voter != node_id and voter not in controllers:
                return f"controller {voter} has not registered, and may not support this feature"
        return None

    def _metadata_version(self, level: int, current: int, unsafe: bool) -> Any:
        if level < current and any(current >= v > level for v in _METADATA_CHANGED):
            if unsafe:
                raise _invalid_metadata(level, "Unsafe metadata downgrade is not supported in this version.")
            raise _invalid_metadata(level, "Refusing to perform the requested downgrade because it"
                                    " might delete metadata information.")
        return rec.FeatureLevelRecord(name=METADATA_VERSION, feature_level=level)

    def _kraft_version(self, level: int, current: int, kind: int, validate_only: bool) -> list[Any]:
        """Kafka hands an upgrade to the raft leader and writes a NoOpRecord after it; a downgrade
        is refused, one to the current level changes nothing."""
        if kind != UPGRADE:
            if level != current:
                raise _invalid(KRAFT_VERSION, level, "Can't downgrade the version of this feature.")
            return []
        if self.kraft is None:
            raise _invalid(KRAFT_VERSION, level, "The raft layer is not available.")
        try:
            self.kraft.upgrade_kraft_version(level, validate_only)
        except ValueError as exc:
            raise _invalid(KRAFT_VERSION, level, str(exc)) from exc
        return [rec.NoOpRecord()]


def _invalid(name: str, level: int, message: str) -> FeatureUpdateError:
    return FeatureUpdateError(ErrorCode.INVALID_UPDATE_VERSION,
                              f"Invalid update version {level} for feature {name}. {message}")


def _invalid_metadata(level: int, message: str) -> FeatureUpdateError:
    return FeatureUpdateError(ErrorCode.INVALID_UPDATE_VERSION,
                              f"Invalid metadata.version {level}. {message}")
