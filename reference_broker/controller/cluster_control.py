"""Broker membership on the active controller: Kafka's ClusterControlManager and
BrokerHeartbeatManager, and the producer id blocks of ProducerIdControlManager.

- BrokerRegistration writes a RegisterBrokerRecord (fenced) with a new broker epoch. The epoch is
  larger than every offset of the metadata log so far, so it grows across restarts and controller
  failovers, and a broker whose metadata has reached it has seen its own registration. A second
  incarnation while the first still heartbeats is DUPLICATE_BROKER_REGISTRATION; the same
  incarnation registering again amends its registration and keeps its epoch and fencing. A new
  incarnation first takes the broker out of every ISR and leadership (its previous process may
  have lost what it had not flushed).
- BrokerHeartbeat: unknown broker BROKER_ID_NOT_REGISTERED, other epoch STALE_BROKER_EPOCH. A
  fenced broker is unfenced once its metadata offset reaches its registration (caught up); a
  broker that asks to be fenced is, and one that asks to shut down is fenced and told to stop.
- ControllerRegistration (KIP-919, Kafka's ``registerController``) writes a
  RegisterControllerRecord with the controller's incarnation, listeners and supported features,
  once metadata.version is 3.7-IV0 or later (before that UNSUPPORTED_VERSION). As in Kafka
  nothing else is checked: a registration replaces the previous one whatever its incarnation
  (only the controller itself sends it, and a new incarnation is a restart), the id need not be
  a voter (an observer controller being added to a dynamic quorum registers too), the cluster
  id is not part of the request, and ``zk_migration_ready`` is always written false (ZooKeeper
  is gone in 4.x).
- A broker whose last heartbeat is older than ``broker.session.timeout.ms`` is fenced. The
  heartbeat times are the active controller's memory only: a new active controller gives every
  broker a whole session from its activation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reference_broker import internal_records as rec
from reference_broker.controller.result import ControllerResult
from reference_broker.controller.settings import PRODUCER_ID_BLOCK_SIZE
from reference_broker.controller.supported_features import CONTROLLER_REGISTRATION_LEVEL
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AllocateProducerIdsResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    ControllerRegistrationResponse,
)

if TYPE_CHECKING:
    from reference_broker.controller.quorum_controller import QuorumController

METADATA_VERSION = "metadata.version"
FENCING_UNFENCE = -1
FENCING_FENCE = 1
#: Kafka's Errors.UNSUPPORTED_VERSION.message(), the answer's error_message (ControllerRegistration
#: answers the error's default message, not the exception's)
UNSUPPORTED_VERSION_MESSAGE = "The version of API is not supported."


def _supports_finalized(finalized: Mapping[str, int], features: Any) -> bool:
    """Kafka's registerBroker check: every feature the broker names supports its finalized level
    (metadata.version 1, others 0, when not finalized); a broker naming no metadata.version
    supports only 1; a finalized feature above 0 the broker does not name is unsupported."""
    supported = {f.name: (f.min_supported_version, f.max_supported_version) for f in features}
    supported.setdefault(METADATA_VERSION, (1, 1))
    for name, (low, high) in supported.items():
        if not low <= finalized.get(name, 1 if name == METADATA_VERSION else 0) <= high:
            return False
    return all(level == 0 or name in supported for name, level in finalized.items())


class ClusterControl:
    def __init__(self, controller: QuorumController):
        self.controller = controller
        #: broker id -> monotonic ms of its last heartbeat (or of this controller's activation)
        self.last_contact: dict[int, float] = {}

    def activate(self, now_ms: float) -> None:
        self.last_contact = {b: now_ms for b in self.controller.image.brokers}

    # -- registration ------------------------------------------------------------------------------
    def register(self, request: Any, now_ms: float) -> ControllerResult:
        ctl = self.controller
        image = ctl.image

        def refuse(code: int) -> ControllerResult:
            return ControllerResult([], BrokerRegistrationResponse(error_code=code, broker_epoch=-1))

        if ctl.settings.cluster_id and request.cluster_id != ctl.settings.cluster_id:
            return refuse(ErrorCode.INCONSISTENT_CLUSTER_ID)
        if not _supports_finalized(image.features, request.features):
            return refuse(ErrorCode.UNSUPPORTED_VERSION)
        existing = image.brokers.get(request.broker_id)
        records: list[Any] = []
        same_incarnation = existing is not None and existing.incarnation_id == request.incarnation_id
        if existing is not None and not same_incarnation:
            alive = now_ms - self.last_contact.get(request.broker_id, -1e18) < ctl.settings.session_timeout_ms
            if alive and not existing.fenced:
                return refuse(ErrorCode.DUPLICATE_BROKER_REGISTRATION)
        if same_incarnation:
            # Kafka amends the registration (listeners, rack) and keeps its epoch and state.
            assert existing is not None
            epoch, fenced, shutting_down = existing.epoch, existing.fenced, existing.in_controlled_shutdown
        else:
            # A new incarnation: whatever the previous one held in ISRs is gone (unclean shutdown).
            records += ctl.replication.leave_partitions(request.broker_id)
            epoch, fenced, shutting_down = ctl.next_broker_epoch(), True, False
        records.append(
            rec.RegisterBrokerRecord(
                broker_id=request.broker_id,
                incarnation_id=request.incarnation_id,
                broker_epoch=epoch,
                end_points=[
                    rec.RegisterBrokerRecord.BrokerEndpoint(
                        name=lst.name, host=lst.host, port=lst.port, security_protocol=lst.security_protocol
                    )
                    for lst in request.listeners
                ],
                features=[
                    rec.RegisterBrokerRecord.BrokerFeature(
                        name=f.name,
                        min_supported_version=f.min_supported_version,
                        max_supported_version=f.max_supported_version,
                    )
                    for f in request.features
                ],
                rack=request.rack,
                fenced=fenced,
                in_controlled_shutdown=shutting_down,
                log_dirs=list(request.log_dirs),
            )
        )
        self.last_contact[request.broker_id] = now_ms
        return ControllerResult(records, BrokerRegistrationResponse(broker_epoch=epoch))

    def register_controller(self, request: Any) -> ControllerResult:
        """ControllerRegistration: the controller's RegisterControllerRecord, or UNSUPPORTED_VERSION
        while metadata.version predates controller registration (3.7-IV0)."""
        level = self.controller.image.features.get(METADATA_VERSION, 0)
        if level < CONTROLLER_REGISTRATION_LEVEL:
            return ControllerResult([], ControllerRegistrationResponse(
                error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=UNSUPPORTED_VERSION_MESSAGE))
        record = rec.RegisterControllerRecord(
            controller_id=request.controller_id,
            incarnation_id=request.incarnation_id,
            zk_migration_ready=False,
            end_points=[
                rec.RegisterControllerRecord.ControllerEndpoint(
                    name=lst.name, host=lst.host, port=lst.port, security_protocol=lst.security_protocol
                )
                for lst in request.listeners
            ],
            features=[
                rec.RegisterControllerRecord.ControllerFeature(
                    name=f.name,
                    min_supported_version=f.min_supported_version,
                    max_supported_version=f.max_supported_version,
                )
                for f in request.features
            ],
        )
        # Kafka's answer leaves error_message at its schema default, "" (not null)
        return ControllerResult([record], ControllerRegistrationResponse())

    # -- heartbeats ----------------------------------------------------------------------------------
    def heartbeat(self, request: Any, now_ms: float) -> ControllerResult:
        ctl = self.controller
        broker = ctl.image.brokers.get(request.broker_id)
        if broker is None:
            return ControllerResult(
                [], BrokerHeartbeatResponse(error_code=ErrorCode.BROKER_ID_NOT_REGISTERED)
            )
        if broker.epoch != request.broker_epoch:
            return ControllerResult([], BrokerHeartbeatResponse(error_code=ErrorCode.STALE_BROKER_EPOCH))
        self.last_contact[broker.id] = now_ms
        caught_up = request.current_metadata_offset >= broker.epoch
        records: list[Any] = []
        fenced = broker.fenced
        shut_down = False
        if request.want_shut_down:
            # Kafka's controlled shutdown: leaderships move away, then the broker may stop.
            if not broker.fenced:
                records += ctl.replication.leave_partitions(broker.id)
                records.append(
                    rec.BrokerRegistrationChangeRecord(
                        broker_id=broker.id, broker_epoch=broker.epoch, fenced=FENCING_FENCE
                    )
                )
            fenced, shut_down = True, True
        elif broker.fenced:
            if caught_up and not request.want_fence:
                records.append(
                    rec.BrokerRegistrationChangeRecord(
                        broker_id=broker.id, broker_epoch=broker.epoch, fenced=FENCING_UNFENCE
                    )
                )
                fenced = False
        elif request.want_fence:
            records += self.fence(broker.id)
            fenced = True
        if records and not fenced and broker.fenced:
            records += ctl.replication.elect_for_unfenced(broker.id, ctl.preview(records))
        return ControllerResult(
            records,
            BrokerHeartbeatResponse(is_caught_up=caught_up, is_fenced=fenced, should_shut_down=shut_down),
        )

    def fence(self, broker_id: int) -> list[Any]:
        """Records fencing ``broker_id``: out of every ISR and leadership first, then fenced."""
        broker = self.controller.image.brokers[broker_id]
        records = self.controller.replication.leave_partitions(broker_id)
        records.append(
            rec.BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=broker.epoch, fenced=FENCING_FENCE
            )
        )
        return records

    def fence_stale_brokers(self, now_ms: float) -> ControllerResult:
        """Fence every unfenced broker whose session has expired (one at a time, as Kafka)."""
        timeout = self.controller.settings.session_timeout_ms
        for broker in sorted(self.controller.image.brokers.values(), key=lambda b: b.id):
            if broker.fenced:
                continue
            last = self.last_contact.setdefault(broker.id, now_ms)
            if now_ms - last >= timeout:
                return ControllerResult(self.fence(broker.id), broker.id)
        return ControllerResult([], None)

    # -- producer ids ---------------------------------------------------------------------------------
    def allocate_producer_ids(self, request: Any) -> ControllerResult:
        image = self.controller.image
        broker = image.brokers.get(request.broker_id)
        if broker is None:
            return ControllerResult(
                [], AllocateProducerIdsResponse(error_code=ErrorCode.BROKER_ID_NOT_REGISTERED)
            )
        if broker.epoch != request.broker_epoch:
            return ControllerResult([], AllocateProducerIdsResponse(error_code=ErrorCode.STALE_BROKER_EPOCH))
        start = image.next_producer_id
        record = rec.ProducerIdsRecord(
            broker_id=broker.id, broker_epoch=broker.epoch, next_producer_id=start + PRODUCER_ID_BLOCK_SIZE
        )
        return ControllerResult(
            [record],
            AllocateProducerIdsResponse(producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE),
        )
