"""Connections and cluster metadata shared by the producer, consumer and admin client.

Names are resolved lazily (PEP 562): a process that needs only ``sdk.client.cluster`` (its
``TopicPartition``) does not load the connection, SASL and client modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk._lazy import lazy_attributes

if TYPE_CHECKING:
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

#: Public name -> the module defining it.
_LAZY: dict[str, str] = {
    "ExponentialBackoff": "sdk.client.backoff",
    "KafkaClient": "sdk.client.client",
    "parse_bootstrap_servers": "sdk.client.client",
    "BrokerMetadata": "sdk.client.cluster",
    "ClusterMetadata": "sdk.client.cluster",
    "PartitionMetadata": "sdk.client.cluster",
    "TopicMetadata": "sdk.client.cluster",
    "TopicPartition": "sdk.client.cluster",
    "Connection": "sdk.client.connection",
    "pick_version": "sdk.client.connection",
    "AbstractTokenProvider": "sdk.client.sasl",
    "OAuthBearerMechanism": "sdk.client.sasl",
    "PlainMechanism": "sdk.client.sasl",
    "SaslMechanism": "sdk.client.sasl",
    "ScramMechanism": "sdk.client.sasl",
    "UnsecuredJwsTokenProvider": "sdk.client.sasl",
}

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


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
