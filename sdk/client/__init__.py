"""Connections and cluster metadata shared by the producer, consumer and admin client."""

from sdk.client.backoff import ExponentialBackoff
from sdk.client.client import KafkaClient, parse_bootstrap_servers
from sdk.client.cluster import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
    TopicPartition,
)
from sdk.client.connection import Connection, pick_version
from sdk.client.sasl import (
    AbstractTokenProvider,
    OAuthBearerMechanism,
    PlainMechanism,
    SaslMechanism,
    ScramMechanism,
    UnsecuredJwsTokenProvider,
)

__all__ = [
    "AbstractTokenProvider",
    "BrokerMetadata",
    "ClusterMetadata",
    "Connection",
    "ExponentialBackoff",
    "KafkaClient",
    "OAuthBearerMechanism",
    "PartitionMetadata",
    "PlainMechanism",
    "SaslMechanism",
    "ScramMechanism",
    "TopicMetadata",
    "TopicPartition",
    "UnsecuredJwsTokenProvider",
    "parse_bootstrap_servers",
    "pick_version",
]
