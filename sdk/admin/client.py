"""``AdminClient``: topics, configs, groups, offsets, records and transactions of a cluster.

aiokafka's ``AIOKafkaAdminClient`` method names and arguments where it has the method, Java's
``Admin`` (and confluent-kafka's coverage) otherwise. Each request goes to the node Kafka wants it
at (``sdk.admin.routing``) and is retried on retriable errors until the call's ``timeout_ms``
(default ``default_api_timeout_ms``). Calls over several items answer per item, a dict keyed by
the item; a failed item carries its error (an ``sdk.errors`` exception) and never hides the
others' results. Bad arguments raise ``ValueError`` (``ConfigError`` for settings) at the call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from sdk.admin import configs as _configs
from sdk.admin import groups as _groups
from sdk.admin import records as _records
from sdk.admin import security as _security
from sdk.admin import topics as _topics
from sdk.admin import transactions as _transactions
from sdk.admin.results import (
    ClusterDescription,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerLag,
    DeletedRecords,
    ListOffsetsResultInfo,
    PartitionProducers,
    ResourceConfigs,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
)
from sdk.admin.routing import AdminRouter, Deadline
from sdk.admin.security import (
    AclBinding,
    AclBindingFilter,
    DeletedAcls,
    UserScramCredentialDeletion,
    UserScramCredentials,
    UserScramCredentialUpsertion,
)
from sdk.admin.types import (
    AbortTransactionSpec,
    AlterConfigOp,
    ConfigResource,
    IsolationLevel,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    RecordsToDelete,
    check_topic_partition,
)
from sdk.client.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.client.config import ClientConfig, _check_number
from sdk.client.coordinators import CoordinatorType
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import ConfigError, IllegalStateError, KafkaError
from sdk.metrics.admin import AdminMetrics
from sdk.metrics.core import MetricName, Metrics, monotonic_ms

__all__ = ["AdminClient", "AdminConfig"]


@dataclass
class AdminConfig(ClientConfig):
    """The admin client's settings: the shared connection settings plus the default deadline of
    one call, retries included (Java's ``default.api.timeout.ms``)."""

    default_api_timeout_ms: float = 60000

    default_client_id: ClassVar[str] = "sdk-admin"

    def validate(self) -> None:
        super().validate()
        _check_number("default_api_timeout_ms", self.default_api_timeout_ms, positive=True)


_SETTINGS = frozenset(f.name for f in fields(AdminConfig))


def _names(values: Iterable[str] | str, argument: str) -> list[str]:
    if isinstance(values, str):
        raise ValueError(f"{argument}: expected a collection of names, not the str {values!r}")
    names = list(values)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{argument}: bad name {name!r}")
    return names


def _instances(values: Iterable[Any], cls: Any, argument: str) -> list[Any]:
    items = list(values)
    for item in items:
        if not isinstance(item, cls):
            raise ValueError(f"{argument}: expected {getattr(cls, '__name__', cls)} items, got {item!r}")
    return items


class AdminClient:
    """Administers a Kafka cluster; ``await start()`` (or ``async with``) before use::

    async with AdminClient(bootstrap_servers="localhost:9092") as admin:
        errors = await admin.create_topics([NewTopic("events", 6, 1)])
        assert errors["events"] is None
    """

    def __init__(self, **settings: Any) -> None:
        unknown = sorted(set(settings) - _SETTINGS - {"default_client_id"})
        if unknown:
            raise ConfigError(unknown[0], "is not an admin client setting")
        self.config = AdminConfig(**settings)
        self.config.validate()
        self._client = KafkaClient.from_config(self.config, allow_auto_topic_creation=False)
        self._metrics = AdminMetrics(self.config.effective_client_id, monotonic_ms)
        self._router = AdminRouter(self._client, self._metrics)
        self._started = False
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (the first metadata from a bootstrap server)."""
        if self._started:
            return
        await self._client.start()
        self._started = True

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._client.close()

    @property
    def metrics_registry(self) -> Metrics:
        """The registry behind ``metrics()`` (for exporters: ``sdk.metrics.opentelemetry``)."""
        return self._metrics.registry

    def metrics(self) -> dict[MetricName, float]:
        """The admin client's metrics now, ``{MetricName: value}`` (Java's ``admin-client-metrics``
        names: ``request-rate``, ``request-total``, ``request-latency-avg``/``-max``, tagged
        ``client-id``)."""
        return self._metrics.registry.metrics()

    async def __aenter__(self) -> AdminClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _deadline(self, timeout_ms: float | None) -> Deadline:
        if self._closed:
            raise IllegalStateError("the admin client is closed")
        if not self._started:
            raise IllegalStateError("call start() first")
        if timeout_ms is None:
            return Deadline(self.config.default_api_timeout_ms)
        _check_number("timeout_ms", timeout_ms, positive=True)
        return Deadline(timeout_ms)

    # -- topics and cluster ---------------------------------------------------------------------

    async def create_topics(
        self, new_topics: Iterable[NewTopic], timeout_ms: float | None = None, validate_only: bool = False
    ) -> dict[str, KafkaError | None]:
        """Create topics (CreateTopics, to the controller): topic -> None or its error
        (``TopicAlreadyExistsError``, ``InvalidReplicationFactorError``, ...)."""
        topics = _instances(new_topics, NewTopic, "new_topics")
        deadline = self._deadline(timeout_ms)
        return await _topics.create_topics(self._router, topics, deadline, validate_only)

    async def delete_topics(
        self, topics: Iterable[str], timeout_ms: float | None = None
    ) -> dict[str, KafkaError | None]:
        """Delete topics (DeleteTopics, to the controller): topic -> None or its error."""
        names = _names(topics, "topics")
        return await _topics.delete_topics(self._router, names, self._deadline(timeout_ms))

    async def list_topics(
        self, include_internal: bool = False, *, timeout_ms: float | None = None
    ) -> list[str]:
        """Every topic's name, sorted (internal ones only with ``include_internal``)."""
        return await _topics.list_topics(self._router, self._deadline(timeout_ms), include_internal)

    async def describe_topics(
        self, topics: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISR of each topic (``error`` set for a missing one)."""
        names = _names(topics, "topics")
        return await _topics.describe_topics(self._router, names, self._deadline(timeout_ms))

    async def describe_cluster(self, *, timeout_ms: float | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster, or Metadata on older brokers)."""
        return await _topics.describe_cluster(self._router, self._deadline(timeout_ms))

    async def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions],
        timeout_ms: float | None = None,
        validate_only: bool = False,
    ) -> dict[str, KafkaError | None]:
        """Grow topics to ``NewPartitions.total_count`` partitions (to the controller)."""
        _names(topic_partitions, "topic_partitions")
        _instances(topic_partitions.values(), NewPartitions, "topic_partitions")
        deadline = self._deadline(timeout_ms)
        return await _topics.create_partitions(self._router, dict(topic_partitions), deadline, validate_only)

    # -- configs --------------------------------------------------------------------------------

    async def describe_configs(
        self,
        config_resources: Iterable[ConfigResource],
        include_synonyms: bool = False,
        *,
        include_documentation: bool = False,
        timeout_ms: float | None = None,
    ) -> dict[ConfigResource, ResourceConfigs]:
        """Each resource's configs (``ConfigResource.configs`` keys to describe only those)."""
        resources = _instances(config_resources, ConfigResource, "config_resources")
        for resource in resources:
            _configs.check_resource(resource)
        return await _configs.describe_configs(
            self._router, resources, self._deadline(timeout_ms), include_synonyms, include_documentation
        )

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        validate_only: bool = False,
        *,
        timeout_ms: float | None = None,
    ) -> dict[ConfigResource, KafkaError | None]:
        """Set, delete, append to or subtract from single config keys of each resource."""
        _instances(changes, ConfigResource, "changes")
        ops = {
            resource: _instances(resource_ops, AlterConfigOp, "changes")
            for resource, resource_ops in changes.items()
        }
        for resource in ops:
            _configs.check_resource(resource)
        return await _configs.incremental_alter_configs(
            self._router, ops, self._deadline(timeout_ms), validate_only
        )

    async def alter_configs(
        self,
        config_resources: Iterable[ConfigResource],
        validate_only: bool = False,
        *,
        timeout_ms: float | None = None,
    ) -> dict[ConfigResource, KafkaError | None]:
        """Replace each resource's whole set of overrides with ``ConfigResource.configs``
        (AlterConfigs; keys left out go back to their defaults)."""
        resources = _instances(config_resources, ConfigResource, "config_resources")
        for resource in resources:
            _configs.check_resource(resource)
            if resource.configs is None:
                raise ValueError(f"config_resources: {resource!r} has no configs to set")
        return await _configs.alter_configs(
            self._router, resources, self._deadline(timeout_ms), validate_only
        )

    # -- consumer groups ------------------------------------------------------------------------

    async def find_coordinator(self, group_id: str, coordinator_type: int = CoordinatorType.GROUP) -> int:
        """The broker id coordinating a group (or, with type 1, a transactional id)."""
        _names([group_id], "group_id")
        return await self._router.coordinators.coordinator(CoordinatorType(coordinator_type), group_id)

    async def list_consumer_groups(
        self,
        broker_ids: Iterable[int] | None = None,
        *,
        states: Iterable[str] | None = None,
        types: Iterable[str] | None = None,
        timeout_ms: float | None = None,
    ) -> list[ConsumerGroupListing]:
        """The groups the brokers coordinate (ListGroups to each of ``broker_ids``, every broker
        when None), optionally only those in ``states`` (e.g. "Stable", "Empty") or of ``types``
        ("classic", "consumer")."""
        state_names = _names(states or (), "states")
        type_names = _names(types or (), "types")
        nodes = None if broker_ids is None else _groups.check_broker_ids(broker_ids)
        return await _groups.list_groups(
            self._router, self._deadline(timeout_ms), state_names, type_names, nodes
        )

    async def describe_consumer_groups(
        self,
        group_ids: Iterable[str],
        group_coordinator_id: int | None = None,
        include_authorized_operations: bool = False,
        *,
        timeout_ms: float | None = None,
    ) -> dict[str, ConsumerGroupDescription]:
        """State, assignor and members (with their assignments) of each group, from its
        coordinator (``group_coordinator_id`` when given, else found per group)."""
        ids = _names(group_ids, "group_ids")
        coordinator = (
            None if group_coordinator_id is None else _groups.check_broker_ids([group_coordinator_id])[0]
        )
        return await _groups.describe_groups(
            self._router, ids, self._deadline(timeout_ms), coordinator, include_authorized_operations
        )

    async def delete_consumer_groups(
        self, group_ids: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, KafkaError | None]:
        """Delete empty groups with their offsets: group -> None or its error
        (``NonEmptyGroupError``, ``GroupIdNotFoundError``)."""
        ids = _names(group_ids, "group_ids")
        return await _groups.delete_groups(self._router, ids, self._deadline(timeout_ms))

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        group_coordinator_id: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (of ``partitions``, or every partition it committed);
        partitions without a committed offset are left out. Raises the group's error."""
        _names([group_id], "group_id")
        coordinator = (
            None if group_coordinator_id is None else _groups.check_broker_ids([group_coordinator_id])[0]
        )
        wanted = (
            None if partitions is None else [check_topic_partition(tp, "partitions") for tp in partitions]
        )
        return await _groups.list_group_offsets(
            self._router, group_id, wanted, require_stable, self._deadline(timeout_ms), coordinator
        )

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Commit ``offsets`` for a group with no active members (``UnknownMemberIdError`` while
        it has some): partition -> None or its error."""
        _names([group_id], "group_id")
        entries = _groups.check_offsets(offsets)
        return await _groups.alter_group_offsets(self._router, group_id, entries, self._deadline(timeout_ms))

    async def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], *, timeout_ms: float | None = None
    ) -> dict[TopicPartition, KafkaError | None]:
        """Forget the group's committed offsets of ``partitions`` (OffsetDelete; refused with
        ``GroupSubscribedToTopicError`` for topics the group's members consume)."""
        _names([group_id], "group_id")
        tps = [check_topic_partition(tp, "partitions") for tp in partitions]
        return await _groups.delete_group_offsets(self._router, group_id, tps, self._deadline(timeout_ms))

    async def consumer_lag(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        isolation_level: IsolationLevel | str = IsolationLevel.READ_UNCOMMITTED,
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, ConsumerLag]:
        """Committed offset, end offset and lag per partition (the group's committed partitions,
        or ``partitions``). ``read_committed`` ends at the last stable offset."""
        _names([group_id], "group_id")
        level = _records.isolation(isolation_level)
        wanted = (
            None if partitions is None else [check_topic_partition(tp, "partitions") for tp in partitions]
        )
        deadline = self._deadline(timeout_ms)
        committed = await _groups.list_group_offsets(self._router, group_id, wanted, False, deadline)
        tps = list(committed) if wanted is None else wanted
        ends = await _records.list_offsets(
            self._router, dict.fromkeys(tps, OffsetSpec.latest()), level, deadline
        )
        lags = {}
        for tp in tps:
            end = ends[tp]
            if end.error is not None:
                raise end.error
            entry = committed.get(tp)
            offset = None if entry is None else entry.offset
            lags[tp] = ConsumerLag(
                offset, end.offset, None if offset is None else max(0, end.offset - offset)
            )
        return lags

    # -- records and offsets --------------------------------------------------------------------

    async def delete_records(
        self,
        records_to_delete: Mapping[TopicPartition, RecordsToDelete | int],
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, DeletedRecords]:
        """Move each partition's log start to the given offset (DeleteRecords, to the leader):
        partition -> the new low watermark, or its error."""
        offsets = {}
        for tp, spec in records_to_delete.items():
            offset = RecordsToDelete(spec) if isinstance(spec, int) else spec
            if not isinstance(offset, RecordsToDelete):
                raise ValueError(f"records_to_delete: {spec!r} is not a RecordsToDelete or an offset")
            offsets[check_topic_partition(tp, "records_to_delete")] = offset.before_offset
        return await _records.delete_records(self._router, offsets, self._deadline(timeout_ms))

    async def list_offsets(
        self,
        topic_partition_offsets: Mapping[TopicPartition, OffsetSpec],
        isolation_level: IsolationLevel | str = IsolationLevel.READ_UNCOMMITTED,
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        """The earliest, latest, max-timestamp or by-time offset of each partition (ListOffsets,
        to the leader)."""
        specs = {}
        for tp, spec in topic_partition_offsets.items():
            if not isinstance(spec, OffsetSpec):
                raise ValueError(f"topic_partition_offsets: {spec!r} is not an OffsetSpec")
            specs[check_topic_partition(tp, "topic_partition_offsets")] = spec
        level = _records.isolation(isolation_level)
        return await _records.list_offsets(self._router, specs, level, self._deadline(timeout_ms))

    # -- transactions ---------------------------------------------------------------------------

    async def list_transactions(
        self,
        states: Iterable[str] | None = None,
        producer_ids: Iterable[int] | None = None,
        duration_ms: int | None = None,
        transactional_id_pattern: str | None = None,
        *,
        timeout_ms: float | None = None,
    ) -> list[TransactionListing]:
        """Transactional ids every broker coordinates (ListTransactions to each), optionally only
        those in ``states`` ("Ongoing", ...), of ``producer_ids``, running longer than
        ``duration_ms`` or matching ``transactional_id_pattern`` (a regular expression)."""
        return await _transactions.list_transactions(
            self._router,
            self._deadline(timeout_ms),
            _names(states or (), "states"),
            _transactions.check_ids(producer_ids or (), "producer_ids"),
            duration_ms,
            transactional_id_pattern,
        )

    async def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, TransactionDescription]:
        """State, producer id/epoch, timeout and partitions of each transactional id, from its
        transaction coordinator."""
        ids = _names(transactional_ids, "transactional_ids")
        return await _transactions.describe_transactions(self._router, ids, self._deadline(timeout_ms))

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: float | None = None
    ) -> dict[TopicPartition, PartitionProducers]:
        """The producers the leader of each partition knows, with any open transaction's first
        offset (where a hanging transaction shows)."""
        tps = [check_topic_partition(tp, "partitions") for tp in partitions]
        return await _transactions.describe_producers(self._router, tps, self._deadline(timeout_ms))

    async def abort_transaction(self, spec: AbortTransactionSpec, *, timeout_ms: float | None = None) -> None:
        """Abort a hanging transaction on one partition (KIP-664): an ABORT marker written by the
        partition's leader (WriteTxnMarkers). On a broker with an authorizer this needs
        CLUSTER_ACTION on the cluster; raises the broker's error (``ClusterAuthorizationFailedError``
        without it)."""
        if not isinstance(spec, AbortTransactionSpec):
            raise ValueError(f"spec: expected an AbortTransactionSpec, not {spec!r}")
        await _transactions.abort_transaction(self._router, spec, self._deadline(timeout_ms))

    async def list_transactions_with_prefix(
        self, prefix: str, *, timeout_ms: float | None = None
    ) -> list[TransactionListing]:
        """The unfinished transactions (open, or KIP-939 prepared) of the transactional ids that
        start with ``prefix``."""
        deadline = self._deadline(timeout_ms)
        return await _transactions.list_transactions_with_prefix(self._router, deadline, prefix)

    async def abort_transactions_with_prefix(
        self, prefix: str, *, timeout_ms: float | None = None
    ) -> list[str]:
        """Abort the unfinished transaction of every transactional id that starts with ``prefix``
        (fencing its producer, as a new producer of the id would); returns the ids aborted."""
        deadline = self._deadline(timeout_ms)
        return await _transactions.abort_transactions_with_prefix(self._router, deadline, prefix)

    # -- ACLs and SCRAM credentials -------------------------------------------------------------

    async def create_acls(
        self, acls: Iterable[AclBinding], *, timeout_ms: float | None = None
    ) -> dict[AclBinding, KafkaError | None]:
        """Add ACLs (the broker needs an authorizer): binding -> None or its error."""
        bindings = _instances(acls, AclBinding, "acls")
        return await _security.create_acls(self._router, bindings, self._deadline(timeout_ms))

    async def describe_acls(
        self, acl_filter: AclBindingFilter, *, timeout_ms: float | None = None
    ) -> list[AclBinding]:
        """The ACLs matching ``acl_filter``; raises the broker's error (``SecurityDisabledError``
        without an authorizer)."""
        _instances([acl_filter], AclBindingFilter, "acl_filter")
        return await _security.describe_acls(self._router, acl_filter, self._deadline(timeout_ms))

    async def delete_acls(
        self, acl_filters: Iterable[AclBindingFilter], *, timeout_ms: float | None = None
    ) -> dict[AclBindingFilter, DeletedAcls]:
        """Delete the ACLs each filter matches: filter -> the deleted ACLs, or its error."""
        filters = _instances(acl_filters, AclBindingFilter, "acl_filters")
        return await _security.delete_acls(self._router, filters, self._deadline(timeout_ms))

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: float | None = None
    ) -> dict[str, UserScramCredentials]:
        """Mechanisms and iterations of each user's SCRAM credentials (every user's when None);
        an unknown user carries ``ResourceNotFoundError``."""
        names = None if users is None else _names(users, "users")
        return await _security.describe_scram(self._router, names, self._deadline(timeout_ms))

    async def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout_ms: float | None = None,
    ) -> dict[str, KafkaError | None]:
        """Set or delete SCRAM credentials (to the controller): user -> None or its error."""
        changes = _instances(
            alterations, UserScramCredentialUpsertion | UserScramCredentialDeletion, "alterations"
        )
        return await _security.alter_scram(self._router, changes, self._deadline(timeout_ms))
