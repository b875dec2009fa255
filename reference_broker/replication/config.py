"""The replication settings, read once from the broker config (Kafka's names and defaults)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class _Settings(Protocol):
    def get(self, key: str) -> Any: ...


@dataclass(frozen=True)
class ReplicationConfig:
    """``replica.*``, ``num.replica.fetchers`` and ``min.insync.replicas`` (broker defaults)."""

    lag_time_max_ms: int = 30_000
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 1_048_576
    fetch_wait_max_ms: int = 500
    fetch_backoff_ms: int = 1_000
    fetch_response_max_bytes: int = 10_485_760
    num_fetchers: int = 1
    min_insync_replicas: int = 1
    #: ``replica.selector.class`` is set: consumers are sent to a replica in their rack (KIP-392)
    select_closest_replica: bool = False

    @classmethod
    def from_broker_config(cls, config: _Settings) -> ReplicationConfig:
        return cls(
            lag_time_max_ms=config.get("replica.lag.time.max.ms"),
            fetch_min_bytes=config.get("replica.fetch.min.bytes"),
            fetch_max_bytes=config.get("replica.fetch.max.bytes"),
            fetch_wait_max_ms=config.get("replica.fetch.wait.max.ms"),
            fetch_backoff_ms=config.get("replica.fetch.backoff.ms"),
            fetch_response_max_bytes=config.get("replica.fetch.response.max.bytes"),
            num_fetchers=config.get("num.replica.fetchers"),
            min_insync_replicas=config.get("min.insync.replicas"),
            select_closest_replica=bool(config.get("replica.selector.class")),
        )
