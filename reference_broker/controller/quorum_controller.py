"""The controller's state and operations, without IO: Kafka's QuorumController minus its event loop.

``QuorumController`` keeps two images: ``committed`` (everything the metadata log has committed,
replayed in order) and ``image`` (committed plus the records of the operation in flight), which
is what the next operation validates against. An operation returns a ``ControllerResult``; the
driver (``ControllerService``) records it with ``begin``, appends the records to the raft log and
answers once ``replay_commit`` reports them committed (``settled``). If leadership is lost first,
``abort`` drops the in-flight records and the image returns to the committed one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reference_broker import internal_records as rec
from reference_broker.controller.acl_control import AclControl
from reference_broker.controller.client_quota_control import ClientQuotaControl
from reference_broker.controller.cluster_control import METADATA_VERSION, ClusterControl
from reference_broker.controller.config_control import ConfigurationControl
from reference_broker.controller.feature_control import FeatureControl
from reference_broker.controller.placement import StripedReplicaPlacer
from reference_broker.controller.replication_control import ReplicationControl
from reference_broker.controller.result import ControllerResult
from reference_broker.controller.scram_control import ScramControl
from reference_broker.controller.settings import METADATA_VERSION_LEVEL, ControllerSettings
from reference_broker.controller.supported_features import GROUP_VERSION, TRANSACTION_VERSION
from reference_broker.metadata.delta import MetadataDelta
from reference_broker.metadata.image import MetadataImage


class QuorumController:
    def __init__(self, settings: ControllerSettings, placer: StripedReplicaPlacer | None = None):
        self.settings = settings
        self.placer = placer or StripedReplicaPlacer()
        self.committed = MetadataImage()
        self.image = self.committed
        self.cluster = ClusterControl(self)
        self.replication = ReplicationControl(self)
        self.configs = ConfigurationControl(self)
        self.acls = AclControl(self)
        self.client_quotas = ClientQuotaControl(self)
        self.scram = ScramControl(self)
        self.features = FeatureControl(self)
        self._inflight: list[Any] | None = None
        self._inflight_last: int | None = None
        #: Set when the in-flight records have been seen committed.
        self.settled = False

    # -- images ----------------------------------------------------------------------------------------
    def preview(self, records: Iterable[Any], image: MetadataImage | None = None) -> MetadataImage:
        """``image`` (the latest by default) with ``records`` replayed onto it."""
        delta = MetadataDelta(image or self.image)
        for record in records:
            delta.replay(record)
        return delta.apply()

    def next_broker_epoch(self) -> int:
        """An epoch above every offset of the log so far and every epoch given before."""
        highest = max((b.epoch for b in self.image.brokers.values()), default=-1)
        return max(self.committed.offset + 1, highest + 1)

    # -- the log -------------------------------------------------------------------------------------------
    def replay_commit(self, records: list[Any], last_offset: int, epoch: int) -> None:
        delta = MetadataDelta(self.committed)
        for record in records:
            delta.replay(record)
        delta.offset, delta.epoch = last_offset, epoch
        self.committed = delta.apply()
        if self._inflight is None:
            self.image = self.committed
        elif list(records) == self._inflight or (
            self._inflight_last is not None and last_offset >= self._inflight_last
        ):
            self._settle()
        else:
            self.image = self.preview(self._inflight, self.committed)

    def appended(self, last_offset: int) -> None:
        """The in-flight records were appended ending at ``last_offset`` (they may already be
        committed: a batch the raft client merged is recognised by its offset)."""
        if self._inflight is None:
            return
        self._inflight_last = last_offset
        if self.committed.offset >= last_offset:
            self._settle()

    def _settle(self) -> None:
        self._inflight = None
        self._inflight_last = None
        self.settled = True
        self.image = self.committed

    def load_snapshot(self, records: list[Any], last_offset: int, epoch: int) -> None:
        delta = MetadataDelta(self.committed)
        for record in records:
            delta.replay(record)
        delta.finish_snapshot()
        delta.offset, delta.epoch = last_offset, epoch
        self.committed = delta.apply()
        self._inflight = self._inflight_last = None
        self.image = self.committed

    def begin(self, records: list[Any]) -> None:
        """``records`` are about to be appended: later operations see them."""
        self._inflight = list(records)
        self._inflight_last = None
        self.settled = False
        self.image = self.preview(records)

    def abort(self) -> None:
        self._inflight = None
        self._inflight_last = None
        self.settled = False
        self.image = self.committed

    # -- operations that are not a request ----------------------------------------------------------------
    def activate(self, now_ms: float) -> None:
        """This node's controller became active: every broker gets a whole session from now."""
        self.cluster.activate(now_ms)

    def bootstrap(self) -> ControllerResult:
        """Records a new cluster needs once: the finalized features, as ``kafka-storage format``
        of Kafka 4.1 writes them (metadata.version 4.1-IV1, group.version 1, and the
        ``transaction.version`` the node is configured with, 2 by default); later changes go
        through UpdateFeatures."""
        if METADATA_VERSION in self.image.features:
            return ControllerResult([])
        levels = {METADATA_VERSION: METADATA_VERSION_LEVEL, GROUP_VERSION: 1,
                  TRANSACTION_VERSION: self.settings.transaction_version}
        return ControllerResult([rec.FeatureLevelRecord(name=name, feature_level=level)
                                 for name, level in levels.items() if level > 0])

    def fence_stale_brokers(self, now_ms: float) -> ControllerResult:
        return self.cluster.fence_stale_brokers(now_ms)

    def rebalance_leaders(self) -> ControllerResult:
        return ControllerResult(self.replication.rebalance_leaders())
