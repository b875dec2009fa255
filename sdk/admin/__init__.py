"""The admin client (``AdminClient``) with what it takes (``sdk.admin.types``) and answers
(``sdk.admin.results``); ``sdk.sync.AdminClient`` is its blocking facade."""

from sdk.admin.client import AdminClient, AdminConfig
from sdk.admin.results import (
    ClusterDescription,
    ConfigEntry,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerLag,
    DeletedRecords,
    ListOffsetsResultInfo,
    MemberDescription,
    Node,
    PartitionProducers,
    ProducerState,
    ResourceConfigs,
    TopicDescription,
    TopicPartitionInfo,
    TransactionDescription,
    TransactionListing,
)
from sdk.admin.types import (
    AbortTransactionSpec,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    IsolationLevel,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    RecordsToDelete,
)

AIOKafkaAdminClient = AdminClient

__all__ = [
    "AIOKafkaAdminClient",
    "AbortTransactionSpec",
    "AdminClient",
    "AdminConfig",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerLag",
    "DeletedRecords",
    "IsolationLevel",
    "ListOffsetsResultInfo",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetSpec",
    "PartitionProducers",
    "ProducerState",
    "RecordsToDelete",
    "ResourceConfigs",
    "TopicDescription",
    "TopicPartitionInfo",
    "TransactionDescription",
    "TransactionListing",
]
