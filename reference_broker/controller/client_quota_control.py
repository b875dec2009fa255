"""Client quotas on the active controller: Kafka's ClientQuotaControlManager.

AlterClientQuotas (49), which every broker of a cluster forwards here, is decided against the
controller's latest image by the code the single broker uses
(``handlers.client_quotas.decide_alterations``: entity types, their combination, keys and values)
and becomes ClientQuotaRecords: one per key whose value changes, ``remove`` set for a key removed
(a removal of a key the entity does not have writes nothing). Every node puts its image's quotas
into its quota store (``cluster.metadata_publisher.ClientQuotaPublisher``), which
DescribeClientQuotas answers from and the node enforces.

Invariants: ``validate_only`` answers as the change would be answered and writes nothing; a
request's records are one batch, committed (and so enforced everywhere) together or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reference_broker import internal_records as rec
from reference_broker.controller.result import ControllerResult
from reference_broker.quotas import Entity
from sdk.protocol.messages import AlterClientQuotasRequest, AlterClientQuotasResponse

if TYPE_CHECKING:
    from reference_broker.controller.quorum_controller import QuorumController


def quota_records(
    entity: Entity, current: Mapping[str, float], changes: Mapping[str, float | None]
) -> list[Any]:
    """The ClientQuotaRecords applying ``changes`` (None: remove the key) to ``current``."""
    records: list[Any] = []
    for key, value in sorted(changes.items()):
        if value is None and key not in current:
            continue
        if value is not None and current.get(key) == value:
            continue
        records.append(
            rec.ClientQuotaRecord(
                entity=[rec.ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                key=key,
                value=0.0 if value is None else value,
                remove=value is None,
            )
        )
    return records


class ClientQuotaControl:
    def __init__(self, controller: QuorumController):
        self.controller = controller

    def alter_client_quotas(self, request: AlterClientQuotasRequest) -> ControllerResult:
        from reference_broker.handlers.client_quotas import decide_alterations

        results, accepted = decide_alterations(request.entries)
        records: list[Any] = []
        if not request.validate_only:
            quotas = self.controller.image.client_quotas
            for entity, changes in accepted:
                records += quota_records(entity, quotas.get(entity, {}), changes)
        return ControllerResult(records, AlterClientQuotasResponse(entries=results))
