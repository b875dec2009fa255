"""The broker's metadata publisher: each committed metadata image turned into this broker's
replica transitions, and the answers Metadata and DescribeCluster give in cluster mode.

``publish(delta, image)`` (Kafka's BrokerMetadataPublisher and ReplicaManager.applyDelta):
- brokers that changed have their inter-broker endpoint given to the peer channels first, so a
  follower can reach its leader;
- nothing is applied before the node has caught up (its image holds its own registration); the
  first image applied is the whole image, after the logs it does not assign here were moved
  aside as ``-stray`` (``_first_publish``, Kafka's stray detection at start);
- a topic of the image exists locally with the same id and partition count (its metadata only:
  a partition's log is created when this node becomes one of its replicas, as Kafka's
  ``getOrCreateLog`` in makeLeader/makeFollower);
- for each changed partition this broker is a replica of: ``become_leader`` when the image names
  it leader, ``become_follower`` of the named leader otherwise, ``stop_replica`` while there is no
  leader; a partition it stopped being a replica of is stopped and its log deleted;
- deleted topics are stopped and deleted;
- a topic's changed dynamic configs replace its local overrides; the changed dynamic broker
  configs of the cluster default ("") and of this broker become its config's dynamic layers.

``SecurityPublisher`` (Kafka's AclPublisher and ScramPublisher), installed on every node of a
cluster, broker or controller: the node's authorizer holds the image's ACLs and its SCRAM store
the image's credentials, replaced whenever an image changes them (the metadata log, replayed at
start or loaded from a snapshot, is their durable copy; the single-node files are not used).
``ClientQuotaPublisher`` does the same for the node's client quotas.

``metadata_response`` (and ``describe_partition_view``, DescribeTopicPartitions') builds Metadata's
brokers and partitions from the image as Kafka's
KRaftMetadataCache does: unfenced brokers only, their endpoint for the client's listener, a
partition whose leader is unknown answered LEADER_NOT_AVAILABLE with leader -1, replicas on
fenced brokers listed as offline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from reference_broker.metadata.delta import MetadataDelta
from reference_broker.metadata.image import CONFIG_BROKER, CONFIG_TOPIC, NO_LEADER, MetadataImage, TopicImage
from sdk.protocol.errors import ErrorCode

log = logging.getLogger("reference_broker.cluster")
#: The internal topics whose partition leaders are the group and transaction coordinators.
COORDINATOR_TOPICS = ("__consumer_offsets", "__transaction_state")


class BrokerMetadataPublisher:
    def __init__(
        self,
        node_id: int,
        *,
        storage: Any,
        replica_manager: Any,
        inter_broker_listener: str | None,
        caught_up: Callable[[MetadataImage], bool] | None = None,
    ):
        self.node_id = node_id
        #: True once an image holds everything committed before this node started (its own
        #: registration); None: every image is. Nothing is applied to the node before then.
        self.caught_up = caught_up
        self.started = False
        self.storage = storage
        self.replica_manager = replica_manager
        self.inter_broker_listener = inter_broker_listener
        self.image = MetadataImage()
        #: Called with (topic, partition, leads_here) for every changed partition of an internal
        #: coordinator topic, after the replica transition (the coordinators load or unload).
        self.coordinator_listeners: list[Callable[[str, int, bool], None]] = []
        #: The node's ``BrokerConfig``, whose dynamic layers follow the image's BROKER configs
        #: (the cluster default "" and this broker's own id).
        self.broker_config: Any = None

    def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if not self.started:
            self.image = image
            if self.caught_up is not None and not self.caught_up(image):
                return
            self.started = True
            self._first_publish(image)
            return
        self._apply(delta, image)

    def _first_publish(self, image: MetadataImage) -> None:
        """Kafka's first publish after start (BrokerMetadataPublisher): the logs this node holds
        that the image does not assign to it are stray (``LogManager.isStrayKraftReplica``: the
        log's topic id is not in the image, or the image's partition of that id does not list
        this node) and are moved aside as ``-stray`` directories, never served nor deleted;
        then the whole image is applied as one delta from empty."""
        from reference_broker.metadata.loader import full_delta

        manager = self.storage.manager
        for topic, partition, _ in list(manager.logs()):
            local = manager.topic(topic)
            current = image.topics_by_id.get(local.topic_id) if local is not None else None
            reg = current.partitions.get(partition) if current is not None else None
            if reg is None or self.node_id not in reg.replicas:
                log.warning("%s-%d: stray replica (not assigned here by the metadata), moving it aside",
                            topic, partition)
                self.replica_manager.stop_replica((topic, partition), False)
                manager.quarantine_partition_log(topic, partition)
        for meta in list(manager.topics().values()):
            if meta.topic_id not in image.topics_by_id:
                self.storage.delete_topic(meta.name)  # its logs are gone: only its metadata file
        for (resource_type, name), values in image.configs.items():
            if resource_type == CONFIG_BROKER and name in ("", str(self.node_id)):
                self._install_broker_configs(name != "", values)
        for topic in image.topics_by_id.values():
            local = manager.topic(topic.name)
            if local is not None and local.topic_id == topic.id:
                self.storage.set_topic_overrides(topic.name, dict(image.topic_config(topic.name)))
        self._apply(full_delta(image), image)

    def _apply(self, delta: MetadataDelta, image: MetadataImage) -> None:
        previous = delta.image
        self.image = image
        for broker_id in delta.changed_brokers:
            reg = image.brokers.get(broker_id)
            if reg is None or broker_id == self.node_id:
                continue
            endpoint = reg.endpoint(self.inter_broker_listener) or reg.endpoint()
            if endpoint is not None:
                self.replica_manager.channels.update(broker_id, endpoint.host, endpoint.port)
        for topic_id, name in delta.deleted_topics.items():
            old = previous.topics_by_id.get(topic_id)
            for partition in sorted(old.partitions) if old is not None else ():
                self.replica_manager.stop_replica((name, partition), True)
            if self.storage.topic(name) is not None:
                self.storage.delete_topic(name)
        for resource_type, name in delta.changed_configs:
            if resource_type == CONFIG_TOPIC and image.topic(name) is not None and self.storage.topic(name):
                self.storage.set_topic_overrides(name, dict(image.topic_config(name)))
            elif resource_type == CONFIG_BROKER and name in ("", str(self.node_id)):
                self._install_broker_configs(name != "", image.configs.get((CONFIG_BROKER, name), {}))
        for topic_id, partitions in delta.changed_partitions.items():
            topic = image.topics_by_id[topic_id]
            self._ensure_local_topic(topic)
            for partition in sorted(partitions):
                self._apply_partition(previous, topic, partition)
                if topic.name in COORDINATOR_TOPICS:
                    leads = topic.partitions[partition].leader == self.node_id
                    for listener in self.coordinator_listeners:
                        listener(topic.name, partition, leads)

    def _install_broker_configs(self, per_broker: bool, values: Mapping[str, str]) -> None:
        from reference_broker.dynamic_config import install_from_metadata

        if self.broker_config is None:
            log.error("dynamic broker configs in the metadata log, but no broker config to put them in")
            return
        install_from_metadata(self.broker_config, self.storage.manager, per_broker, values)

    def _ensure_local_topic(self, topic: TopicImage) -> None:
        local = self.storage.topic(topic.name)
        count = max(topic.partitions) + 1 if topic.partitions else 0
        if local is not None and local.topic_id != topic.id:
            # A topic of the same name from before a deletion this node did not see.
            self.storage.delete_topic(topic.name)
            local = None
        if local is None:
            configs = dict(self.image.topic_config(topic.name))
            self.storage.manager.create_topic(topic.name, count, configs, topic_id=topic.id)
        elif local.num_partitions < count:
            self.storage.add_partitions(topic.name, count)

    def _apply_partition(self, previous: MetadataImage, topic: TopicImage, partition: int) -> None:
        reg = topic.partitions[partition]
        tp = (topic.name, partition)
        manager = self.replica_manager
        if self.node_id in reg.replicas:
            self.storage.manager.ensure_partition_log(topic.name, partition)
            if reg.leader == self.node_id:
                manager.become_leader(
                    tp, reg.leader_epoch, reg.partition_epoch, list(reg.replicas), list(reg.isr)
                )
            elif reg.leader != NO_LEADER:
                manager.become_follower(
                    tp, reg.leader, reg.leader_epoch, reg.partition_epoch, list(reg.replicas)
                )
            else:
                manager.stop_replica(tp, False)
            return
        before = previous.topics_by_id.get(topic.id)
        old = before.partitions.get(partition) if before is not None else None
        if old is not None and self.node_id in old.replicas:
            self._remove_replica(tp)

    def _remove_replica(self, tp: tuple[str, int]) -> None:
        """This broker left ``tp``'s replicas (a reassignment moved it away): stop fetching and
        delete the local log, its directory renamed ``-delete`` at once and removed after
        ``log.segment.delete.delay.ms`` (Kafka's ``applyDelta`` -> ``stopPartitions`` with
        delete, ``LogManager.asyncDelete``). A later assignment here starts from an empty log."""
        log.info("%s-%d: no longer a replica here, deleting it", tp[0], tp[1])
        self.replica_manager.stop_replica(tp, True)
        self.storage.manager.delete_partition_log(*tp)  # the replica manager has no log deleter here


class SecurityPublisher:
    """Keeps a node's ACL store and SCRAM credential store equal to its metadata image's. The
    authorizer allows super users only until ``loaded()`` holds: before that its ACLs may be a
    stale prefix of the log."""

    def __init__(self, authorizer: Any, scram_credentials: Any, loaded: Callable[[], bool] = lambda: True):
        self.authorizer = authorizer
        self.scram_credentials = scram_credentials
        if authorizer is not None:
            authorizer.load_from(loaded)
            authorizer.store.use_metadata_log()
        if scram_credentials is not None:
            scram_credentials.use_metadata_log()
        empty = MetadataImage()
        self._acls: Any = empty.acls
        self._scram: Any = empty.scram_credentials

    def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        # Images share an unchanged map with their predecessor: identity says what changed.
        if image.acls is not self._acls:
            self._acls = image.acls
            if self.authorizer is not None:
                self.authorizer.store.replace(list(image.acls.values()))
        if image.scram_credentials is not self._scram:
            self._scram = image.scram_credentials
            if self.scram_credentials is not None:
                self.scram_credentials.replace(image.scram_credentials)


class ClientQuotaPublisher:
    """Keeps a node's quota store equal to its metadata image's client quotas (Kafka's
    DynamicClientQuotaPublisher): DescribeClientQuotas answers from it and the node enforces it.
    The metadata log is their durable copy; the single-node file is not used."""

    def __init__(self, quota_store: Any):
        self.quota_store = quota_store
        quota_store.use_metadata_log()
        self._quotas: Any = MetadataImage().client_quotas

    def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if image.client_quotas is not self._quotas:  # an unchanged map is shared between images
            self._quotas = image.client_quotas
            self.quota_store.replace(image.client_quotas)


def alive_brokers(image: MetadataImage, listener: str) -> list[tuple[int, str, int, str | None]]:
    """(id, host, port, rack) of the unfenced brokers with an endpoint on ``listener``."""
    result = []
    for broker in sorted(image.brokers.values(), key=lambda b: b.id):
        endpoint = broker.endpoint(listener)
        if not broker.fenced and endpoint is not None:
            result.append((broker.id, endpoint.host, endpoint.port, broker.rack))
    return result


def partition_view(image: MetadataImage, topic: TopicImage, listener: str) -> list[dict[str, Any]]:
    """The fields of Metadata's partition entries for ``topic``."""
    entries = []
    for index, part in sorted(topic.partitions.items()):
        leader = image.brokers.get(part.leader)
        has_leader = leader is not None and leader.endpoint(listener) is not None
        offline = [r for r in part.replicas if r not in image.brokers or image.brokers[r].fenced]
        entries.append(
            {
                "error_code": ErrorCode.NONE if has_leader else ErrorCode.LEADER_NOT_AVAILABLE,
                "partition_index": index,
                "leader_id": part.leader if has_leader else -1,
                "leader_epoch": part.leader_epoch,
                "replica_nodes": list(part.replicas),
                "isr_nodes": list(part.isr),
                "offline_replicas": offline,
            }
        )
    return entries


def describe_partition_view(broker: Any, ctx: Any, name: str, indexes: range) -> list[dict[str, Any]]:
    """DescribeTopicPartitions' partition fields of ``name`` for ``indexes`` in cluster mode:
    Metadata's view of the image (leader, replicas, ISR, offline replicas) plus KIP-966's ELR
    fields, empty as on a Kafka cluster without eligible leader replicas. Indexes the image does
    not know (yet) are left out."""
    image: MetadataImage = broker.metadata_publisher.image
    topic = image.topic(name)
    if topic is None:
        return []
    listener = ctx.connection.session.listener.name
    view = {e["partition_index"]: e for e in partition_view(image, topic, listener)}
    return [
        {**view[index], "eligible_leader_replicas": [], "last_known_elr": []}
        for index in indexes
        if index in view
    ]


def controller_for_clients(image: MetadataImage, answering: int) -> int:
    """The controller id Metadata and DescribeCluster report. Clients cannot reach a KRaft
    controller, and any broker forwards their controller requests to it, so Kafka names an alive
    broker (a random one). This names the answering broker itself while the image has it alive:
    a client reached it just now, whereas another broker (the active controller's node included)
    may have died and still be unfenced; librdkafka then waits for that broker to come back before
    sending CreateTopics, and times out. Otherwise the lowest alive broker."""
    alive = [b.id for b in image.brokers.values() if not b.fenced]
    if answering in alive:
        return answering
    return min(alive) if alive else -1


def metadata_response(broker: Any, ctx: Any, request: Any) -> Any:
    """Metadata (key 3) answered from the image in cluster mode (``handlers.metadata`` calls it)."""
    from reference_broker.handlers.auth import (
        Operation,
        ResourceType,
        authorize,
        authorize_cluster,
        topic_denied,
    )
    from reference_broker.handlers.common import topic_name_problem
    from reference_broker.handlers.metadata import (
        ALL_TOPIC_OPERATIONS,
        AUTHORIZED_OPS_OMITTED,
        Partition,
        Topic,
    )
    from reference_broker.storage import is_internal
    from sdk.protocol.messages import MetadataResponse

    image: MetadataImage = broker.metadata_publisher.image
    listener = ctx.connection.session.listener.name
    include_ops = bool(request.include_topic_authorized_operations)

    def entry(topic: TopicImage) -> Any:
        return Topic(
            error_code=ErrorCode.NONE,
            name=topic.name,
            topic_id=topic.id,
            is_internal=is_internal(topic.name),
            partitions=[Partition(**fields) for fields in partition_view(image, topic, listener)],
            topic_authorized_operations=ALL_TOPIC_OPERATIONS if include_ops else AUTHORIZED_OPS_OMITTED,
        )

    topics = []
    allow_create = request.allow_auto_topic_creation if ctx.api_version >= 4 else True
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
            if not topic_denied(broker, ctx, Operation.DESCRIBE, topic.name):
                topics.append(entry(topic))
    else:
        for wanted in request.topics:
            if wanted.name is None:
                found = image.topics_by_id.get(wanted.topic_id)
                if found is None or topic_denied(broker, ctx, Operation.DESCRIBE, found.name):
                    topics.append(
                        Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id)
                    )
                else:
                    topics.append(entry(found))
                continue
            if topic_denied(broker, ctx, Operation.DESCRIBE, wanted.name):
                topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=wanted.name))
                continue
            found = image.topic(wanted.name)
            if found is not None:
                topics.append(entry(found))
            elif topic_name_problem(wanted.name):
                topics.append(Topic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=wanted.name))
            elif allow_create and broker.config.get("auto.create.topics.enable"):
                if broker.authorizer is not None and not (
                    authorize_cluster(broker, ctx, Operation.CREATE)
                    or authorize(broker, ctx, Operation.CREATE, ResourceType.TOPIC, wanted.name)
                ):
                    topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=wanted.name))
                    continue
                # Kafka's answer while the topic is asked for (or already in flight)
                broker.auto_topic_creation.create(wanted.name, ctx)
                topics.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=wanted.name))
            else:
                topics.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=wanted.name))
    return MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(node_id=b, host=host, port=port, rack=rack)
            for b, host, port, rack in alive_brokers(image, listener)
        ],
        cluster_id=broker.cluster_id,
        controller_id=controller_for_clients(image, broker.node_id),
        topics=topics,
        cluster_authorized_operations=AUTHORIZED_OPS_OMITTED,
    )


def describe_cluster_response(broker: Any, ctx: Any, request: Any) -> Any:
    """DescribeCluster (key 60) of brokers from the image in cluster mode."""
    from reference_broker.handlers.cluster import cluster_authorized_operations
    from sdk.protocol.messages import DescribeClusterResponse

    image: MetadataImage = broker.metadata_publisher.image
    listener = ctx.connection.session.listener.name
    include_fenced = bool(getattr(request, "include_fenced_brokers", False))
    brokers = []
    for reg in sorted(image.brokers.values(), key=lambda b: b.id):
        endpoint = reg.endpoint(listener)
        if endpoint is None or (reg.fenced and not include_fenced):
            continue
        brokers.append(
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=reg.id, host=endpoint.host, port=endpoint.port, rack=reg.rack, is_fenced=reg.fenced
            )
        )
    return DescribeClusterResponse(
        cluster_id=broker.cluster_id,
        controller_id=controller_for_clients(image, broker.node_id),
        endpoint_type=1,
        brokers=brokers,
        cluster_authorized_operations=cluster_authorized_operations(broker, ctx, request),
    )
