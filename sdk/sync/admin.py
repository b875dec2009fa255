"""The blocking AdminClient: ``sdk.AdminClient`` driven from the shared event-loop thread.

Every method hands its coroutine to the process-wide loop thread (``sdk.sync._loop``) and waits
for it, so the asyncio client is only ever touched from that thread; the arguments, results and
errors are the asyncio client's. No call waits longer than its own ``timeout_ms`` (the client's
``default_api_timeout_ms`` when not given), which every async method already honours.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from sdk.admin.client import AdminClient as AsyncAdminClient
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
)
from sdk.client.cluster import TopicPartition
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import KafkaError
from sdk.metrics.core import MetricName, Metrics
from sdk.sync._loop import shared_loop

__all__ = ["AdminClient"]

T = TypeVar("T")


class AdminClient:
    """Blocking twin of ``sdk.AdminClient``: the same settings and methods, no ``await``::

    with AdminClient(bootstrap_servers="localhost:9092") as admin:
        admin.create_topics([NewTopic("events", 6, 1)])
    """

    def __init__(self, **settings: Any) -> None:
        self._admin = AsyncAdminClient(**settings)
        self.config = self._admin.config
        self._runner = shared_loop()

    __init__.__signature__ = inspect.signature(AsyncAdminClient.__init__)  # type: ignore[attr-defined]  # for help()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def start(self) -> None:
        self._run(self._admin.start())

    @property
    def metrics_registry(self) -> Metrics:
        """The registry behind ``metrics()`` (for exporters: ``sdk.metrics.opentelemetry``)."""
        return self._admin.metrics_registry

    def metrics(self) -> dict[MetricName, float]:
        """See ``sdk.AdminClient.metrics`` (read on the loop thread)."""
        return self._runner.call(self._admin.metrics)

    def close(self) -> None:
        self._run(self._admin.close())

    def __enter__(self) -> AdminClient:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- topics, cluster, configs ---------------------------------------------------------------

    def create_topics(
        self, new_topics: Iterable[NewTopic], timeout_ms: float | None = None, validate_only: bool = False
    ) -> dict[str, KafkaError | None]:
        return self._run(self._admin.create_topics(list(new_topics), timeout_ms, validate_only))

    def delete_topics(
        self, topics: Iterable[str], timeout_ms: float | None = None
    ) -> dict[str, KafkaError | None]:
        return self._run(self._admin.delete_topics(list(topics), timeout_ms=timeout_ms))

    def list_topics(self, include_internal: bool = False, *, timeout_ms: float | None = None) -> list[str]:
        return self._run(self._admin.list_topics(include_internal, timeout_ms=timeout_ms))

    def describe_topics(
        self, topics: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, TopicDescription]:
        return self._run(self._admin.describe_topics(list(topics), timeout_ms=timeout_ms))

    def describe_cluster(self, *, timeout_ms: float | None = None) -> ClusterDescription:
        return self._run(self._admin.describe_cluster(timeout_ms=timeout_ms))

    def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions],
        timeout_ms: float | None = None,
        validate_only: bool = False,
    ) -> dict[str, KafkaError | None]:
        return self._run(self._admin.create_partitions(topic_partitions, timeout_ms, validate_only))

    def describe_configs(
        self,
        config_resources: Iterable[ConfigResource],
        include_synonyms: bool = False,
        *,
        include_documentation: bool = False,
        timeout_ms: float | None = None,
    ) -> dict[ConfigResource, ResourceConfigs]:
        return self._run(
            self._admin.describe_configs(
                list(config_resources),
                include_synonyms,
                include_documentation=include_documentation,
                timeout_ms=timeout_ms,
            )
        )

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        validate_only: bool = False,
        *,
        timeout_ms: float | None = None,
    ) -> dict[ConfigResource, KafkaError | None]:
        return self._run(self._admin.incremental_alter_configs(changes, validate_only, timeout_ms=timeout_ms))

    def alter_configs(
        self,
        config_resources: Iterable[ConfigResource],
        validate_only: bool = False,
        *,
        timeout_ms: float | None = None,
    ) -> dict[ConfigResource, KafkaError | None]:
        return self._run(
            self._admin.alter_configs(list(config_resources), validate_only, timeout_ms=timeout_ms)
        )

    # -- groups ---------------------------------------------------------------------------------

    def find_coordinator(self, group_id: str, coordinator_type: int = 0) -> int:
        return self._run(self._admin.find_coordinator(group_id, coordinator_type))

    def list_consumer_groups(
        self,
        broker_ids: Iterable[int] | None = None,
        *,
        states: Iterable[str] | None = None,
        types: Iterable[str] | None = None,
        timeout_ms: float | None = None,
    ) -> list[ConsumerGroupListing]:
        nodes = None if broker_ids is None else list(broker_ids)
        return self._run(
            self._admin.list_consumer_groups(nodes, states=states, types=types, timeout_ms=timeout_ms)
        )

    def describe_consumer_groups(
        self,
        group_ids: Iterable[str],
        group_coordinator_id: int | None = None,
        include_authorized_operations: bool = False,
        *,
        timeout_ms: float | None = None,
    ) -> dict[str, ConsumerGroupDescription]:
        return self._run(
            self._admin.describe_consumer_groups(
                list(group_ids), group_coordinator_id, include_authorized_operations, timeout_ms=timeout_ms
            )
        )

    def delete_consumer_groups(
        self, group_ids: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, KafkaError | None]:
        return self._run(self._admin.delete_consumer_groups(list(group_ids), timeout_ms=timeout_ms))

    def list_consumer_group_offsets(
        self,
        group_id: str,
        group_coordinator_id: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        wanted = None if partitions is None else list(partitions)
        return self._run(
            self._admin.list_consumer_group_offsets(
                group_id, group_coordinator_id, wanted, require_stable=require_stable, timeout_ms=timeout_ms
            )
        )

    def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        return self._run(self._admin.alter_consumer_group_offsets(group_id, offsets, timeout_ms=timeout_ms))

    def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], *, timeout_ms: float | None = None
    ) -> dict[TopicPartition, KafkaError | None]:
        return self._run(
            self._admin.delete_consumer_group_offsets(group_id, list(partitions), timeout_ms=timeout_ms)
        )

    def consumer_lag(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        isolation_level: IsolationLevel | str = IsolationLevel.READ_UNCOMMITTED,
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, ConsumerLag]:
        wanted = None if partitions is None else list(partitions)
        return self._run(self._admin.consumer_lag(group_id, wanted, isolation_level, timeout_ms=timeout_ms))

    # -- records and offsets --------------------------------------------------------------------

    def delete_records(
        self,
        records_to_delete: Mapping[TopicPartition, RecordsToDelete | int],
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, DeletedRecords]:
        return self._run(self._admin.delete_records(records_to_delete, timeout_ms=timeout_ms))

    def list_offsets(
        self,
        topic_partition_offsets: Mapping[TopicPartition, OffsetSpec],
        isolation_level: IsolationLevel | str = IsolationLevel.READ_UNCOMMITTED,
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        return self._run(
            self._admin.list_offsets(topic_partition_offsets, isolation_level, timeout_ms=timeout_ms)
        )

    # -- transactions ---------------------------------------------------------------------------

    def list_transactions(
        self,
        states: Iterable[str] | None = None,
        producer_ids: Iterable[int] | None = None,
        duration_ms: int | None = None,
        transactional_id_pattern: str | None = None,
        *,
        timeout_ms: float | None = None,
    ) -> list[TransactionListing]:
        return self._run(
            self._admin.list_transactions(
                states, producer_ids, duration_ms, transactional_id_pattern, timeout_ms=timeout_ms
            )
        )

    def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, TransactionDescription]:
        return self._run(self._admin.describe_transactions(list(transactional_ids), timeout_ms=timeout_ms))

    def describe_producers(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: float | None = None
    ) -> dict[TopicPartition, PartitionProducers]:
        return self._run(self._admin.describe_producers(list(partitions), timeout_ms=timeout_ms))

    def abort_transaction(self, spec: AbortTransactionSpec, *, timeout_ms: float | None = None) -> None:
        self._run(self._admin.abort_transaction(spec, timeout_ms=timeout_ms))

    def list_transactions_with_prefix(
        self, prefix: str, *, timeout_ms: float | None = None
    ) -> list[TransactionListing]:
        return self._run(self._admin.list_transactions_with_prefix(prefix, timeout_ms=timeout_ms))

    def abort_transactions_with_prefix(self, prefix: str, *, timeout_ms: float | None = None) -> list[str]:
        return self._run(self._admin.abort_transactions_with_prefix(prefix, timeout_ms=timeout_ms))

    # -- ACLs and SCRAM credentials -------------------------------------------------------------

    def create_acls(
        self, acls: Iterable[AclBinding], *, timeout_ms: float | None = None
    ) -> dict[AclBinding, KafkaError | None]:
        return self._run(self._admin.create_acls(list(acls), timeout_ms=timeout_ms))

    def describe_acls(
        self, acl_filter: AclBindingFilter, *, timeout_ms: float | None = None
    ) -> list[AclBinding]:
        return self._run(self._admin.describe_acls(acl_filter, timeout_ms=timeout_ms))

    def delete_acls(
        self, acl_filters: Iterable[AclBindingFilter], *, timeout_ms: float | None = None
    ) -> dict[AclBindingFilter, DeletedAcls]:
        return self._run(self._admin.delete_acls(list(acl_filters), timeout_ms=timeout_ms))

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: float | None = None
    ) -> dict[str, UserScramCredentials]:
        return self._run(
            self._admin.describe_user_scram_credentials(
                None if users is None else list(users), timeout_ms=timeout_ms
            )
        )

    def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout_ms: float | None = None,
    ) -> dict[str, KafkaError | None]:
        return self._run(self._admin.alter_user_scram_credentials(list(alterations), timeout_ms=timeout_ms))
