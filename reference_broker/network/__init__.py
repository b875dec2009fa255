"""The broker's TCP front: frames in, responses out, one asyncio task per connection."""

from reference_broker.network.server import Connection, KafkaServer, RequestContext

__all__ = ["Connection", "KafkaServer", "RequestContext"]
