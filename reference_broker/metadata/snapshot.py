"""An image written back as records: what a metadata snapshot holds (Kafka's image writers).

``image_records(image)`` lists the records that, replayed onto an empty image (with
``finish_snapshot``), give ``image`` again: features first (metadata.version before anything
that depends on it), then brokers, controllers, topics with their configs and partitions, other configs,
the producer id block, the client quotas, the ACLs (with their ids) and the SCRAM credentials.
"""

from __future__ import annotations

from typing import Any

from reference_broker import internal_records as rec
from reference_broker.metadata.image import MetadataImage
from reference_broker.security.scram import MECHANISM_TYPES

METADATA_VERSION = "metadata.version"


def image_records(image: MetadataImage) -> list[Any]:
    records: list[Any] = []
    for name in sorted(image.features, key=lambda n: (n != METADATA_VERSION, n)):
        records.append(rec.FeatureLevelRecord(name=name, feature_level=image.features[name]))
    for broker in sorted(image.brokers.values(), key=lambda b: b.id):
        records.append(
            rec.RegisterBrokerRecord(
                broker_id=broker.id,
                incarnation_id=broker.incarnation_id,
                broker_epoch=broker.epoch,
                end_points=[
                    rec.RegisterBrokerRecord.BrokerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in broker.endpoints
                ],
                features=[
                    rec.RegisterBrokerRecord.BrokerFeature(
                        name=n, min_supported_version=lo, max_supported_version=hi
                    )
                    for n, (lo, hi) in sorted(broker.features.items())
                ],
                rack=broker.rack,
                fenced=broker.fenced,
                in_controlled_shutdown=broker.in_controlled_shutdown,
            )
        )
    for controller in sorted(image.controllers.values(), key=lambda c: c.id):
        records.append(
            rec.RegisterControllerRecord(
                controller_id=controller.id,
                incarnation_id=controller.incarnation_id,
                zk_migration_ready=controller.zk_migration_ready,
                end_points=[
                    rec.RegisterControllerRecord.ControllerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in controller.endpoints
                ],
                features=[
                    rec.RegisterControllerRecord.ControllerFeature(
                        name=n, min_supported_version=lo, max_supported_version=hi
                    )
                    for n, (lo, hi) in sorted(controller.features.items())
                ],
            )
        )
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        records.append(rec.TopicRecord(name=topic.name, topic_id=topic.id))
        for index, part in sorted(topic.partitions.items()):
            records.append(
                rec.PartitionRecord(
                    partition_id=index,
                    topic_id=topic.id,
                    replicas=list(part.replicas),
                    isr=list(part.isr),
                    removing_replicas=list(part.removing_replicas),
                    adding_replicas=list(part.adding_replicas),
                    leader=part.leader,
                    leader_recovery_state=part.leader_recovery_state,
                    leader_epoch=part.leader_epoch,
                    partition_epoch=part.partition_epoch,
                    eligible_leader_replicas=list(part.elr) or None,
                    last_known_elr=list(part.last_known_elr) or None,
                )
            )
    for (resource_type, resource_name), values in sorted(image.configs.items()):
        for name, value in sorted(values.items()):
            records.append(
                rec.ConfigRecord(
                    resource_type=resource_type, resource_name=resource_name, name=name, value=value
                )
            )
    if image.next_producer_id > 0:
        records.append(
            rec.ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id)
        )
    for entity, quotas in sorted(image.client_quotas.items(), key=lambda item: repr(item[0])):
        for key, quota in sorted(quotas.items()):
            records.append(
                rec.ClientQuotaRecord(
                    entity=[
                        rec.ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity
                    ],
                    key=key,
                    value=quota,
                )
            )
    for acl_id, acl in sorted(image.acls.items()):
        records.append(
            rec.AccessControlEntryRecord(
                id=acl_id,
                resource_type=acl.resource_type,
                resource_name=acl.resource_name,
                pattern_type=acl.pattern_type,
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission,
            )
        )
    for user, credentials in sorted(image.scram_credentials.items()):
        for mechanism, credential in sorted(credentials.items()):
            records.append(
                rec.UserScramCredentialRecord(
                    name=user,
                    mechanism=MECHANISM_TYPES[mechanism],
                    salt=credential.salt,
                    stored_key=credential.stored_key,
                    server_key=credential.server_key,
                    iterations=credential.iterations,
                )
            )
    return records
