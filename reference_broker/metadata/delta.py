"""Replaying metadata records onto an image: ``MetadataDelta`` (Kafka's MetadataDelta and the
Cluster/Topics/Configs/Features/ProducerIds/ClientQuotas/Acls/Scram deltas behind it).

A delta is started from an image, records are replayed into it in log order, and ``apply()``
builds the next image. It also says what changed (``changed_brokers``, ``changed_partitions``,
``deleted_topics``, ``created_topics``) so a publisher can act on the difference only.

Semantics follow Kafka's replay exactly: a PartitionChangeRecord's ``leader`` of -2 keeps the
leader and its epoch, any other value sets it and bumps the leader epoch; null lists (isr,
replicas, adding/removing replicas, ELR, last known ELR) leave the field as it was; a
leader_recovery_state of -1 keeps it; every change bumps the partition epoch. A record that
contradicts the image (a change of an unknown partition, a fence of a broker epoch that is not the
registered one, the removal of an ACL id or a SCRAM credential the image does not hold)
raises ``MetadataReplayError``: the log and the image disagree, which is a bug,
never something to skip.
"""

from __future__ import annotations

import dataclasses
import uuid
from types import MappingProxyType
from typing import Any

from reference_broker import internal_records as rec
from reference_broker.metadata.image import (
    CONFIG_TOPIC,
    NO_LEADER_CHANGE,
    RECOVERY_NO_CHANGE,
    BrokerRegistration,
    ControllerRegistration,
    Endpoint,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from reference_broker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from reference_broker.security.scram import MECHANISMS, ScramCredential

# BrokerRegistrationChangeRecord.fenced (BrokerRegistrationFencingChange)
FENCING_UNFENCE = -1
FENCING_NONE = 0
FENCING_FENCE = 1
METADATA_VERSION = "metadata.version"


class MetadataReplayError(Exception):
    """A record that cannot apply to the image it is replayed onto."""


def merge_partition_change(part: PartitionRegistration, change: Any) -> PartitionRegistration:
    """``part`` after ``change`` (a PartitionChangeRecord), as Kafka's PartitionRegistration.merge."""

    def pick(value: list[int] | None, current: tuple[int, ...]) -> tuple[int, ...]:
        return current if value is None else tuple(value)

    if change.leader == NO_LEADER_CHANGE:
        leader, leader_epoch = part.leader, part.leader_epoch
    else:
        leader, leader_epoch = change.leader, part.leader_epoch + 1
    recovery = part.leader_recovery_state
    if change.leader_recovery_state != RECOVERY_NO_CHANGE:
        recovery = change.leader_recovery_state
    return PartitionRegistration(
        replicas=pick(change.replicas, part.replicas),
        isr=pick(change.isr, part.isr),
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=part.partition_epoch + 1,
        removing_replicas=pick(change.removing_replicas, part.removing_replicas),
        adding_replicas=pick(change.adding_replicas, part.adding_replicas),
        leader_recovery_state=recovery,
        elr=pick(change.eligible_leader_replicas, part.elr),
        last_known_elr=pick(change.last_known_elr, part.last_known_elr),
    )


def partition_from_record(record: Any) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=tuple(record.replicas),
        isr=tuple(record.isr),
        leader=record.leader,
        leader_epoch=record.leader_epoch,
        partition_epoch=record.partition_epoch,
        removing_replicas=tuple(record.removing_replicas),
        adding_replicas=tuple(record.adding_replicas),
        leader_recovery_state=record.leader_recovery_state,
        elr=tuple(record.eligible_leader_replicas or ()),
        last_known_elr=tuple(record.last_known_elr or ()),
    )


class MetadataDelta:
    """The changes replayed on top of ``image`` since it was taken."""

    def __init__(self, image: MetadataImage):
        self.image = image
        self._brokers: dict[int, BrokerRegistration | None] = {}
        # None: gone (only a snapshot that does not state a controller removes it)
        self._controllers: dict[int, ControllerRegistration | None] = {}
        # topic id -> (name, {partition: registration}) for topics created or changed
        self._topics: dict[uuid.UUID, tuple[str, dict[int, PartitionRegistration]]] = {}
        self._deleted_topics: dict[uuid.UUID, str] = {}
        self._created_topics: set[uuid.UUID] = set()
        self._configs: dict[tuple[int, str], dict[str, str] | None] = {}
        self._features: dict[str, int | None] = {}
        self._next_producer_id: int | None = None
        self._quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = {}
        self._acls: dict[uuid.UUID, AclBinding | None] = {}
        # (user, mechanism name) -> credential, None: removed
        self._scram: dict[tuple[str, str], ScramCredential | None] = {}
        self.changed_partitions: dict[uuid.UUID, set[int]] = {}
        self.offset = image.offset
        self.epoch = image.epoch

    # -- reading through the delta ---------------------------------------------------------
    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self.image.brokers.get(broker_id)

    def _topic_partitions(self, topic_id: uuid.UUID) -> tuple[str, dict[int, PartitionRegistration]]:
        entry = self._topics.get(topic_id)
        if entry is not None:
            return entry
        if topic_id in self._deleted_topics:
            raise MetadataReplayError(f"topic {topic_id} was removed")
        topic = self.image.topics_by_id.get(topic_id)
        if topic is None:
            raise MetadataReplayError(f"unknown topic id {topic_id}")
        entry = (topic.name, dict(topic.partitions))
        self._topics[topic_id] = entry
        return entry

    @property
    def changed_brokers(self) -> set[int]:
        return set(self._brokers)

    @property
    def changed_controllers(self) -> set[int]:
        """Ids of the controllers whose registration this delta set (Kafka's changedControllers)."""
        return set(self._controllers)

    @property
    def features_changed(self) -> bool:
        """Whether this delta set any finalized feature level (Kafka's featuresDelta != null)."""
        return bool(self._features)

    def controller(self, controller_id: int) -> ControllerRegistration | None:
        if controller_id in self._controllers:
            return self._controllers[controller_id]
        return self.image.controllers.get(controller_id)

    @property
    def deleted_topics(self) -> dict[uuid.UUID, str]:
        """Topics removed by this delta (and not created again by it): id -> name."""
        return dict(self._deleted_topics)

    @property
    def changed_configs(self) -> set[tuple[int, str]]:
        """(resource_type, resource_name) of every config resource this delta touched."""
        return set(self._configs)

    @property
    def created_topics(self) -> set[uuid.UUID]:
        return set(self._created_topics)

    @property
    def acls_changed(self) -> bool:
        return bool(self._acls)

    @property
    def scram_changed(self) -> bool:
        return bool(self._scram)

    def acl(self, acl_id: uuid.UUID) -> AclBinding | None:
        if acl_id in self._acls:
            return self._acls[acl_id]
        return self.image.acls.get(acl_id)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        if (user, mechanism) in self._scram:
            return self._scram[(user, mechanism)]
        return self.image.scram_credentials.get(user, {}).get(mechanism)

    # -- replay --------------------------------------------------------------------------------
    def replay(self, record: Any, offset: int | None = None, epoch: int | None = None) -> None:
        """Apply one metadata record (a message of ``reference_broker.internal_records``)."""
        handler = _REPLAY.get(type(record).__name__)
        if handler is None:
            raise MetadataReplayError(f"no replay for metadata record {type(record).__name__}")
        handler(self, record)
        if offset is not None:
            self.offset = offset
        if epoch is not None:
            self.epoch = epoch

    def _register_broker(self, r: Any) -> None:
        self._brokers[r.broker_id] = BrokerRegistration(
            id=r.broker_id,
            epoch=r.broker_epoch,
            incarnation_id=r.incarnation_id,
            endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in r.end_points),
            rack=r.rack,
            fenced=bool(r.fenced),
            in_controlled_shutdown=bool(r.in_controlled_shutdown),
            features=MappingProxyType(
                {f.name: (f.min_supported_version, f.max_supported_version) for f in r.features}
            ),
        )

    def _register_controller(self, r: Any) -> None:
        # A later record replaces the whole registration (Kafka's ClusterDelta.replay).
        self._controllers[r.controller_id] = ControllerRegistration(
            id=r.controller_id,
            incarnation_id=r.incarnation_id,
            zk_migration_ready=bool(r.zk_migration_ready),
            endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in r.end_points),
            features=MappingProxyType(
                {f.name: (f.min_supported_version, f.max_supported_version) for f in r.features}
            ),
        )

    def _registered(self, broker_id: int, epoch: int) -> BrokerRegistration:
        current = self.broker(broker_id)
        if current is None:
            raise MetadataReplayError(f"broker {broker_id} is not registered")
        if current.epoch != epoch:
            raise MetadataReplayError(
                f"broker {broker_id} is registered with epoch {current.epoch}, the record names {epoch}"
            )
        return current

    def _unregister_broker(self, r: Any) -> None:
        self._registered(r.broker_id, r.broker_epoch)
        self._brokers[r.broker_id] = None

    def _fence_broker(self, r: Any) -> None:
        current = self._registered(r.id, r.epoch)
        self._brokers[r.id] = dataclasses.replace(current, fenced=True)

    def _unfence_broker(self, r: Any) -> None:
        current = self._registered(r.id, r.epoch)
        self._brokers[r.id] = dataclasses.replace(current, fenced=False)

    def _broker_change(self, r: Any) -> None:
        current = self._registered(r.broker_id, r.broker_epoch)
        fenced = current.fenced
        if r.fenced == FENCING_FENCE:
            fenced = True
        elif r.fenced == FENCING_UNFENCE:
            fenced = False
        elif r.fenced != FENCING_NONE:
            raise MetadataReplayError(f"unknown fencing change {r.fenced}")
        shutdown = current.in_controlled_shutdown
        if r.in_controlled_shutdown == 1:
            shutdown = True
        elif r.in_controlled_shutdown != 0:
            raise MetadataReplayError(f"unknown controlled shutdown change {r.in_controlled_shutdown}")
        self._brokers[r.broker_id] = dataclasses.replace(
            current, fenced=fenced, in_controlled_shutdown=shutdown
        )

    def _topic(self, r: Any) -> None:
        self._topics[r.topic_id] = (r.name, {})
        self._created_topics.add(r.topic_id)
        self._deleted_topics.pop(r.topic_id, None)

    def _partition(self, r: Any) -> None:
        _, partitions = self._topic_partitions(r.topic_id)
        partitions[r.partition_id] = partition_from_record(r)
        self.changed_partitions.setdefault(r.topic_id, set()).add(r.partition_id)

    def _partition_change(self, r: Any) -> None:
        _, partitions = self._topic_partitions(r.topic_id)
        current = partitions.get(r.partition_id)
        if current is None:
            raise MetadataReplayError(f"unknown partition {r.topic_id}:{r.partition_id}")
        partitions[r.partition_id] = merge_partition_change(current, r)
        self.changed_partitions.setdefault(r.topic_id, set()).add(r.partition_id)

    def _remove_topic(self, r: Any) -> None:
        name, _ = self._topic_partitions(r.topic_id)
        del self._topics[r.topic_id]
        self.changed_partitions.pop(r.topic_id, None)
        if r.topic_id in self._created_topics:
            self._created_topics.discard(r.topic_id)
        else:
            self._deleted_topics[r.topic_id] = name
        # Kafka drops the topic's dynamic configs with it.
        self._configs[(CONFIG_TOPIC, name)] = None

    def _config(self, r: Any) -> None:
        key = (r.resource_type, r.resource_name)
        current = self._configs.get(key, ...)
        values = dict(self.image.configs.get(key, {})) if current is ... else dict(current or {})
        if r.value is None:
            values.pop(r.name, None)
        else:
            values[r.name] = r.value
        self._configs[key] = values

    def _feature_level(self, r: Any) -> None:
        # Level 0 removes a feature (metadata.version is never removed).
        if r.feature_level == 0 and r.name != METADATA_VERSION:
            self._features[r.name] = None
        else:
            self._features[r.name] = r.feature_level

    def _producer_ids(self, r: Any) -> None:
        current = self.next_producer_id
        if r.next_producer_id < current:
            raise MetadataReplayError(f"producer id block goes back from {current} to {r.next_producer_id}")
        self._next_producer_id = r.next_producer_id

    @property
    def next_producer_id(self) -> int:
        return self.image.next_producer_id if self._next_producer_id is None else self._next_producer_id

    def _client_quota(self, r: Any) -> None:
        entity = tuple(sorted((e.entity_type, e.entity_name) for e in r.entity))
        values = self._quotas.get(entity)
        if values is None:
            values = dict(self.image.client_quotas.get(entity, {}))
            self._quotas[entity] = values
        if r.remove:
            values.pop(r.key, None)
        else:
            values[r.key] = r.value

    def _access_control_entry(self, r: Any) -> None:
        try:
            binding = AclBinding(
                ResourceType(r.resource_type),
                r.resource_name,
                PatternType(r.pattern_type),
                r.principal,
                r.host,
                Operation(r.operation),
                Permission(r.permission_type),
            )
        except ValueError as exc:
            raise MetadataReplayError(f"ACL {r.id}: {exc}") from None
        self._acls[r.id] = binding

    def _remove_access_control_entry(self, r: Any) -> None:
        if self.acl(r.id) is None:
            raise MetadataReplayError(f"no ACL with id {r.id} to remove")
        self._acls[r.id] = None

    @staticmethod
    def _mechanism_name(code: int) -> str:
        mechanism = MECHANISMS.get(code)
        if mechanism is None:
            raise MetadataReplayError(f"unknown SCRAM mechanism {code}")
        return mechanism[0]

    def _scram_credential(self, r: Any) -> None:
        self._scram[(r.name, self._mechanism_name(r.mechanism))] = ScramCredential(
            salt=bytes(r.salt),
            stored_key=bytes(r.stored_key),
            server_key=bytes(r.server_key),
            iterations=r.iterations,
        )

    def _remove_scram_credential(self, r: Any) -> None:
        mechanism = self._mechanism_name(r.mechanism)
        if self.scram_credential(r.name, mechanism) is None:
            raise MetadataReplayError(f"no {mechanism} credential of user {r.name} to remove")
        self._scram[(r.name, mechanism)] = None

    def _ignore(self, r: Any) -> None:
        """Records that change nothing in this image (NoOp, transaction markers of the metadata
        log, delegation tokens)."""

    def finish_snapshot(self) -> None:
        """After replaying a whole snapshot onto the previous image: whatever the snapshot did not
        state no longer exists (Kafka's MetadataDelta.finishSnapshot)."""
        for broker_id in self.image.brokers:
            self._brokers.setdefault(broker_id, None)
        for controller_id in self.image.controllers:
            self._controllers.setdefault(controller_id, None)
        for topic_id, topic in self.image.topics_by_id.items():
            if topic_id not in self._topics:
                self._deleted_topics[topic_id] = topic.name
        for key in self.image.configs:
            self._configs.setdefault(key, None)
        for name in self.image.features:
            self._features.setdefault(name, None)
        for entity in self.image.client_quotas:
            self._quotas.setdefault(entity, {})
        for acl_id in self.image.acls:
            self._acls.setdefault(acl_id, None)
        for user, credentials in self.image.scram_credentials.items():
            for mechanism in credentials:
                self._scram.setdefault((user, mechanism), None)

    # -- building the next image -----------------------------------------------------------------
    def apply(self) -> MetadataImage:
        image = self.image
        brokers = dict(image.brokers)
        for broker_id, reg in self._brokers.items():
            if reg is None:
                brokers.pop(broker_id, None)
            else:
                brokers[broker_id] = reg
        topics = dict(image.topics_by_id)
        names = dict(image.topic_ids)
        for topic_id, name in self._deleted_topics.items():
            topics.pop(topic_id, None)
            if names.get(name) == topic_id:
                del names[name]
        for topic_id, (name, partitions) in self._topics.items():
            topics[topic_id] = TopicImage(name, topic_id, MappingProxyType(partitions))
            names[name] = topic_id
        configs = dict(image.configs)
        for key, values in self._configs.items():
            if values:
                configs[key] = MappingProxyType(values)
            else:
                configs.pop(key, None)
        features = dict(image.features)
        for name, level in self._features.items():
            if level is None:
                features.pop(name, None)
            else:
                features[name] = level
        quotas = dict(image.client_quotas)
        for entity, quota_values in self._quotas.items():
            if quota_values:
                quotas[entity] = MappingProxyType(dict(quota_values))
            else:
                quotas.pop(entity, None)
        return MetadataImage(
            offset=self.offset,
            epoch=self.epoch,
            brokers=MappingProxyType(brokers),
            topics_by_id=MappingProxyType(topics),
            topic_ids=MappingProxyType(names),
            configs=MappingProxyType(configs),
            features=MappingProxyType(features),
            next_producer_id=self.next_producer_id,
            client_quotas=MappingProxyType(quotas),
            acls=self._applied_acls(),
            scram_credentials=self._applied_scram(),
            controllers=self._applied_controllers(),
        )

    def _applied_controllers(self) -> Any:
        if not self._controllers:
            return self.image.controllers
        controllers = dict(self.image.controllers)
        for controller_id, registration in self._controllers.items():
            if registration is None:
                controllers.pop(controller_id, None)
            else:
                controllers[controller_id] = registration
        return MappingProxyType(controllers)

    def _applied_acls(self) -> Any:
        if not self._acls:
            return self.image.acls
        acls = dict(self.image.acls)
        for acl_id, binding in self._acls.items():
            if binding is None:
                acls.pop(acl_id, None)
            else:
                acls[acl_id] = binding
        return MappingProxyType(acls)

    def _applied_scram(self) -> Any:
        if not self._scram:
            return self.image.scram_credentials
        users = {user: dict(creds) for user, creds in self.image.scram_credentials.items()}
        for (user, mechanism), credential in self._scram.items():
            if credential is None:
                users.get(user, {}).pop(mechanism, None)
            else:
                users.setdefault(user, {})[mechanism] = credential
        return MappingProxyType(
            {user: MappingProxyType(creds) for user, creds in users.items() if creds}
        )


_REPLAY = {
    rec.RegisterBrokerRecord.__name__: MetadataDelta._register_broker,
    rec.UnregisterBrokerRecord.__name__: MetadataDelta._unregister_broker,
    rec.FenceBrokerRecord.__name__: MetadataDelta._fence_broker,
    rec.UnfenceBrokerRecord.__name__: MetadataDelta._unfence_broker,
    rec.BrokerRegistrationChangeRecord.__name__: MetadataDelta._broker_change,
    rec.TopicRecord.__name__: MetadataDelta._topic,
    rec.PartitionRecord.__name__: MetadataDelta._partition,
    rec.PartitionChangeRecord.__name__: MetadataDelta._partition_change,
    rec.RemoveTopicRecord.__name__: MetadataDelta._remove_topic,
    rec.ConfigRecord.__name__: MetadataDelta._config,
    rec.FeatureLevelRecord.__name__: MetadataDelta._feature_level,
    rec.ProducerIdsRecord.__name__: MetadataDelta._producer_ids,
    rec.ClientQuotaRecord.__name__: MetadataDelta._client_quota,
    rec.NoOpRecord.__name__: MetadataDelta._ignore,
    rec.BeginTransactionRecord.__name__: MetadataDelta._ignore,
    rec.EndTransactionRecord.__name__: MetadataDelta._ignore,
    rec.AbortTransactionRecord.__name__: MetadataDelta._ignore,
    rec.RegisterControllerRecord.__name__: MetadataDelta._register_controller,
    rec.AccessControlEntryRecord.__name__: MetadataDelta._access_control_entry,
    rec.RemoveAccessControlEntryRecord.__name__: MetadataDelta._remove_access_control_entry,
    rec.UserScramCredentialRecord.__name__: MetadataDelta._scram_credential,
    rec.RemoveUserScramCredentialRecord.__name__: MetadataDelta._remove_scram_credential,
    rec.DelegationTokenRecord.__name__: MetadataDelta._ignore,
    # KRaft control records share the log; they carry no cluster metadata.
    "LeaderChangeMessage": MetadataDelta._ignore,
    "SnapshotHeaderRecord": MetadataDelta._ignore,
    "SnapshotFooterRecord": MetadataDelta._ignore,
    "VotersRecord": MetadataDelta._ignore,
    "KRaftVersionRecord": MetadataDelta._ignore,
    rec.RemoveDelegationTokenRecord.__name__: MetadataDelta._ignore,
}
