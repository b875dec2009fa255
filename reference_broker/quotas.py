"""Client quotas as Kafka has them: the configured values, kept durably, and their enforcement.

Entities are Kafka's: ``user``, ``client-id`` (alone or together) and ``ip``; a name of None is the
entity type's default. Keys: ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes/s, whole
numbers), ``request_percentage`` (percent of one thread's time per second: a request's handler
time and the time spent sending its response, as Kafka charges handler and network threads) and
``controller_mutation_rate`` for user/client-id entities, ``connection_creation_rate`` for ip
entities. They are validated as Kafka 4.1's ClientQuotaControlManager validates them and kept in
``client-quotas.json`` in the data dir (written whole to a temporary file, then renamed).

Enforcement follows Kafka's ClientQuotaManager: the quota of a (user, client-id) pair is the most
specific configured entity (``/users/u/clients/c``, ``/users/u/clients/<default>``, ``/users/u``,
``/users/<default>/clients/c``, ... ``/clients/<default>``), and the rate is measured per concrete
entity of that shape, over ``quota.window.num`` samples of ``quota.window.size.seconds`` (a young
measurement counts as ``num - 1`` full windows, as Kafka's ``Rate`` does). A request that takes
the rate over the quota gets ``throttle_time_ms = (rate - quota) / quota * window`` (the request
quota's at most one window), which the response carries and for which the connection is then
muted (KIP-219). A consumer fetch is measured by its response's size before the response is
built; one over the quota is answered without records and its bytes are taken back (``unrecord``),
as Kafka's KafkaApis does, so a throttled consumer reads what its quota lets through.

``controller_mutation_rate`` (partitions created, added or deleted per second, KIP-599) is measured
with Kafka's token bucket instead: it holds up to ``quota * num * window`` partitions, refills at
the quota, and a request's throttle time is what it takes to bring a negative bucket back to zero.
See ``ControllerMutationQuota`` for its strict and permissive forms.
"""

from __future__ import annotations

import collections
import contextlib
import ipaddress
import json
import math
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: Key -> the largest whole number it takes (Kafka's LONG/INT keys), None for a DOUBLE key.
CLIENT_KEYS: dict[str, int | None] = {
    PRODUCER_BYTE_RATE: 2**63 - 1,
    CONSUMER_BYTE_RATE: 2**63 - 1,
    REQUEST_PERCENTAGE: None,
    CONTROLLER_MUTATION_RATE: None,
}
IP_KEYS: dict[str, int | None] = {"connection_creation_rate": 2**31 - 1}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
FILE_NAME = "client-quotas.json"

#: An entity: sorted (type, name or None for the default) pairs.
Entity = tuple[tuple[str, str | None], ...]


class QuotaError(ValueError):
    """An alteration or filter Kafka refuses with INVALID_REQUEST; the message says why."""


def make_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """Validate an entity's (type, name) pairs as Kafka does and return it in canonical order."""
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise QuotaError(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaError(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise QuotaError(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise QuotaError("Invalid empty client quota entity")
    return tuple(sorted(seen.items()))


def _valid_keys(entity: Entity) -> dict[str, int | None]:
    types = {t for t, _ in entity}
    if IP in types:
        if types != {IP}:
            raise QuotaError(
                # Kafka's message, missing space included.
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
            )
        name = dict(entity)[IP]
        if name is not None and not _resolvable(name):
            raise QuotaError(f"{name} is not a valid IP or resolvable host.")
        return IP_KEYS
    return CLIENT_KEYS


def _resolvable(host: str) -> bool:
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return True
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        return False
    return True


def check_value(entity: Entity, key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue: a known key, a positive value, whole numbers within range
    for its LONG/INT keys."""
    keys = _valid_keys(entity)
    if key not in keys:
        raise QuotaError(f"Invalid configuration key {key}")
    if not value > 0.0:
        raise QuotaError(f"Quota {key} must be greater than 0")
    largest = keys[key]
    if largest is None:
        return
    if value > largest:
        kind = "an INT" if largest < 2**32 else "a LONG"
        raise QuotaError(f"Proposed value for {key} is too large for {kind}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise QuotaError(f"{key} cannot be a fractional value.")


def checked_changes(entity: Entity, ops: Iterable[tuple[str, float, bool]]) -> dict[str, float | None]:
    """One entity's (key, value, remove) operations as key -> new value (None: removed), checked
    as Kafka's ClientQuotaControlManager checks them (QuotaError says why not). A single node and
    a cluster's controller both decide here."""
    changes: dict[str, float | None] = {}
    for key, value, remove in ops:
        if key in changes:
            raise QuotaError(f"Duplicate quota key {key} not updating quota for this entity")
        changes[key] = None if remove else value
    _valid_keys(entity)
    for key, new_value in changes.items():
        if new_value is not None:
            check_value(entity, key, new_value)
    return changes


class QuotaStore:
    """The configured quotas, by entity; durable in ``client-quotas.json``."""

    def __init__(self, data_dir: Path | str):
        path = Path(data_dir) / FILE_NAME
        self.path: Path | None = path  # None: the metadata log keeps them (cluster mode)
        self.entries: dict[Entity, dict[str, float]] = {}
        self.version = 0  # bumped by every change (the enforcement's cache key)
        if path.exists():
            for item in json.loads(path.read_text()):
                entity = tuple((str(t), n) for t, n in item["entity"])
                self.entries[entity] = {str(k): float(v) for k, v in item["quotas"].items()}

    def alter(self, entity: Entity, ops: Iterable[tuple[str, float, bool]], *, validate_only: bool) -> None:
        """Apply (key, value, remove) operations to one entity; all or none (QuotaError)."""
        changes = checked_changes(entity, ops)
        if not validate_only:
            self.apply(entity, changes)

    def apply(self, entity: Entity, changes: Mapping[str, float | None]) -> None:
        """Set each key to its value (None: remove it) for ``entity``; ``changes`` is checked."""
        current = dict(self.entries.get(entity, {}))
        for key, new_value in changes.items():
            if new_value is None:
                current.pop(key, None)
            else:
                current[key] = new_value
        if current:
            self.entries[entity] = current
        else:
            self.entries.pop(entity, None)
        self.version += 1
        self._save()

    def use_metadata_log(self) -> None:
        """From now on the quotas are the metadata image's (``replace``): a cluster node neither
        reads nor writes the single node's file."""
        self.path = None
        self.entries = {}
        self.version += 1

    def replace(self, entries: Mapping[Entity, Mapping[str, float]]) -> None:
        """Every quota at once (a cluster node publishing its metadata image's quotas)."""
        self.entries = {entity: dict(values) for entity, values in entries.items() if values}
        self.version += 1
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        data = [
            {"entity": [list(pair) for pair in entity], "quotas": values}
            for entity, values in sorted(self.entries.items(), key=lambda e: repr(e[0]))
        ]
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def describe(
        self, components: list[tuple[str, int, str | None]], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        """The entities matching a DescribeClientQuotas filter: (entity type, match type, match)."""
        types = [t for t, _, _ in components]
        if len(set(types)) != len(types):
            raise QuotaError("Duplicate entity type in filter")
        if IP in types and (USER in types or CLIENT_ID in types):
            raise QuotaError(
                "Invalid entity filter component combination, IP filter component should not be used"
                " with user or clientId filter component."
            )
        found = []
        for entity, values in self.entries.items():
            names = dict(entity)
            if strict and set(names) != set(types):
                continue
            if all(_matches(names, t, m, v) for t, m, v in components):
                found.append((entity, dict(values)))
        return found

    def get(self, entity: Entity) -> dict[str, float] | None:
        return self.entries.get(entity)


def _matches(names: dict[str, str | None], entity_type: str, match_type: int, match: str | None) -> bool:
    if entity_type not in names:
        return False
    name = names[entity_type]
    if match_type == MATCH_EXACT:
        return name == match
    if match_type == MATCH_DEFAULT:
        return name is None
    if match_type == MATCH_SPECIFIED:
        return name is not None
    raise QuotaError(f"Unknown match type {match_type}")


class Rate:
    """Kafka's sampled ``Rate``: the sum over the last ``num`` windows divided by their span."""

    __slots__ = ("num", "samples", "window")

    def __init__(self, num: int, window_s: float):
        self.num = num
        self.window = window_s
        self.samples: collections.deque[list[float]] = collections.deque()  # [start, total]

    def record(self, value: float, now: float) -> None:
        if not self.samples or now >= self.samples[-1][0] + self.window:
            self.samples.append([now, 0.0])
        self.samples[-1][1] += value
        self._purge(now)

    def _purge(self, now: float) -> None:
        while self.samples and self.samples[0][0] + self.num * self.window <= now:
            self.samples.popleft()

    def span(self, now: float) -> float:
        """The measured span, at least ``num - 1`` windows (Kafka's ``windowSize``)."""
        elapsed = now - self.samples[0][0] if self.samples else 0.0
        full = int(elapsed / self.window)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window
        return elapsed

    def value(self, now: float) -> float:
        self._purge(now)
        return sum(total for _, total in self.samples) / self.span(now)


class TokenBucket:
    """Kafka's ``TokenBucket``: credits refilled at the quota per second up to the burst, taken by
    each recorded value; a new bucket starts full."""

    __slots__ = ("tokens", "updated")

    def __init__(self) -> None:
        self.tokens: float | None = None
        self.updated = 0.0

    def refill(self, rate: float, burst: float, now: float) -> float:
        """The credits at ``now``."""
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + rate * max(0.0, now - self.updated))
        self.updated = now
        return self.tokens

    def take(self, value: float, rate: float, burst: float, now: float) -> float:
        """Record ``value``; the credits left (negative once the quota is exhausted)."""
        self.tokens = min(burst, self.refill(rate, burst, now) - value)
        return self.tokens


class ControllerMutationQuota:
    """One request's ``controller_mutation_rate`` quota, as Kafka's Strict- and
    PermissiveControllerMutationQuota.

    Strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): ``admit`` refuses a
    topic's partitions while the bucket is already negative, and otherwise takes them all, even
    past zero, so a request below the quota is never cut in the middle of a topic. Permissive
    (older versions, whose clients do not know THROTTLING_QUOTA_EXCEEDED): ``admit`` always takes
    them. Either way ``throttle_ms`` is the time to bring the bucket back to zero, as measured when
    the quota was found exhausted, less the time since.
    """

    def __init__(
        self,
        bucket: TokenBucket,
        limit: float,
        burst: float,
        strict: bool,
        clock: Callable[[], float],
        max_throttle_s: float,
    ):
        self._bucket = bucket
        self._limit = limit
        self._burst = burst
        self.strict = strict
        self._clock = clock
        self._max_throttle_s = max_throttle_s
        self._throttle_s = 0.0
        self._throttled_at = 0.0

    def _exhausted(self, tokens: float, now: float) -> None:
        wait = -tokens / self._limit if self._limit > 0 else self._max_throttle_s
        self._throttle_s, self._throttled_at = wait, now

    def admit(self, partitions: int) -> bool:
        """Record ``partitions`` mutations for one topic; False when a strict quota refuses them."""
        now = self._clock()
        if self.strict:
            tokens = self._bucket.refill(self._limit, self._burst, now)
            if tokens < 0:
                self._exhausted(tokens, now)
                return False
            self._bucket.take(partitions, self._limit, self._burst, now)
            return True
        tokens = self._bucket.take(partitions, self._limit, self._burst, now)
        if tokens < 0:
            self._exhausted(tokens, now)
        return True

    def throttle_ms(self) -> int:
        """How long the client is to wait before its next mutation (0 if the quota held)."""
        left = self._throttle_s - (self._clock() - self._throttled_at)
        return min(max(0, round(left * 1000)), 2**31 - 1)


class QuotaManager:
    """Measures produce bytes, fetch bytes and handler time per quota entity; says how long to
    throttle."""

    def __init__(
        self,
        store: QuotaStore,
        window_num: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.window_num = window_num
        self.window_s = window_s
        self.clock = clock
        self._rates: dict[tuple[str, str, str], Rate] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    @classmethod
    def from_config(cls, config: Any) -> QuotaManager:
        return cls(
            QuotaStore(config.data_dir),
            config.get("quota.window.num"),
            float(config.get("quota.window.size.seconds")),
        )

    @property
    def enabled(self) -> bool:
        return bool(self.store.entries)

    def quota(self, user: str, client_id: str, key: str) -> tuple[float, tuple[str, str]] | None:
        """(limit, the concrete (user, client-id) the rate is measured for) of the most specific
        configured entity with ``key``, in Kafka's precedence; None when no quota applies."""
        candidates: list[tuple[Entity, tuple[str, str]]] = [
            (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
            (((CLIENT_ID, None), (USER, user)), (user, client_id)),
            (((USER, user),), (user, "")),
            (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
            (((CLIENT_ID, None), (USER, None)), (user, client_id)),
            (((USER, None),), (user, "")),
            (((CLIENT_ID, client_id),), ("", client_id)),
            (((CLIENT_ID, None),), ("", client_id)),
        ]
        for entity, measured in candidates:
            values = self.store.entries.get(entity)
            if values is not None and key in values:
                return values[key], measured
        return None

    def record(self, user: str, client_id: str, key: str, value: float, *, max_window: bool = False) -> float:
        """Record ``value`` against ``key``'s quota; the throttle time in seconds (0 if within)."""
        found = self.quota(user, client_id, key)
        if found is None:
            return 0.0
        limit, (m_user, m_client) = found
        rate = self._rates.get((key, m_user, m_client))
        if rate is None:
            rate = self._rates[(key, m_user, m_client)] = Rate(self.window_num, self.window_s)
        now = self.clock()
        rate.record(value, now)
        measured = rate.value(now)
        if limit <= 0:
            return self.window_s * self.window_num if not max_window else self.window_s
        if measured <= limit:
            return 0.0
        throttle = (measured - limit) / limit * rate.span(now)
        return min(throttle, self.window_s) if max_window else throttle

    def unrecord(self, user: str, client_id: str, key: str, value: float) -> None:
        """Take back a ``value`` just recorded against ``key`` (Kafka's ``unrecordQuotaSensor``:
        a throttled fetch is answered without its records, so they are not counted)."""
        found = self.quota(user, client_id, key)
        if found is None:
            return
        rate = self._rates.get((key, *found[1]))
        if rate is not None:
            rate.record(-value, self.clock())

    def controller_mutation(
        self, user: str, client_id: str, *, strict: bool
    ) -> ControllerMutationQuota | None:
        """The ``controller_mutation_rate`` quota for one CreateTopics, CreatePartitions or
        DeleteTopics request of (user, client-id); None when none applies."""
        found = self.quota(user, client_id, CONTROLLER_MUTATION_RATE)
        if found is None:
            return None
        limit, measured = found
        bucket = self._buckets.get(measured)
        if bucket is None:
            bucket = self._buckets[measured] = TokenBucket()
        burst = max(0.0, limit) * self.window_num * self.window_s
        return ControllerMutationQuota(
            bucket, limit, burst, strict, self.clock, max_throttle_s=self.window_num * self.window_s
        )

    def fetch_window_bytes(self, user: str, client_id: str) -> int:
        """The most a fetch response may carry under the consumer quota: the quota over ``num - 1``
        windows (Kafka's ``getMaxValueInQuotaWindow``)."""
        found = self.quota(user, client_id, CONSUMER_BYTE_RATE)
        if found is None:
            return 2**31 - 1
        return int(min(found[0] * (self.window_num - 1) * self.window_s, 2**31 - 1))


def quota_identity(principal: str, client_id: str | None) -> tuple[str, str]:
    """(user, client-id) a request is measured as: the principal's name (``User:alice`` ->
    ``alice``, ``ANONYMOUS`` without authentication) and its client id."""
    _, _, name = principal.partition(":")
    return name or principal, client_id or ""
