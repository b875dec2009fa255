"""Ending the transactions that earlier runs of a sink left unfinished under its prefix.

A task resolves the transaction of its own transactional id when it starts (``writer.py``), but
nothing starts on an id no task uses any more: the ids of a batch write that failed (Spark calls
the writer's ``abort`` on the driver, or, if the driver died, nothing), and the ids beyond the
current number of sink partitions after a query restarted with fewer (Flink's KafkaSink probes
and aborts those on restore). An open per-task transaction would hold read_committed readers of
its partitions back until ``transaction.timeout.ms``; a prepared two-phase one, forever.

The driver finds them with the admin client (ListTransactions filtered by the prefix,
``AdminClient.list_transactions_with_prefix``) and ends each as a new task of its id would: a
prepared transaction that the prefix's newest intent records is committed (its batch's decision
was made), any other is aborted. Only ids of the form ``<prefix>-<sink partition>`` are touched.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from sdk.admin.client import AdminConfig
from sdk.errors import InvalidTxnStateError
from sdk.sync import AdminClient, Producer
from spark_integration.two_phase import init_two_phase, resolve_kept_transaction

log = logging.getLogger(__name__)

_ADMIN_SETTINGS = frozenset(f.name for f in fields(AdminConfig))


def lingering_ids(consumer_settings: Mapping[str, Any], prefix: str) -> dict[str, int]:
    """Transactional id -> sink partition of every unfinished transaction under ``prefix``."""
    settings = {k: v for k, v in consumer_settings.items() if k in _ADMIN_SETTINGS}
    with AdminClient(**settings) as admin:
        listed = admin.list_transactions_with_prefix(f"{prefix}-")
    found: dict[str, int] = {}
    for listing in listed:
        suffix = listing.transactional_id[len(prefix) + 1:]
        if suffix.isdigit():
            found[listing.transactional_id] = int(suffix)
    return found


def resolve_lingering(producer_settings: Mapping[str, Any], consumer_settings: Mapping[str, Any],
                      intent_topic: str, prefix: str, two_phase: bool,
                      first_partition: int = 0) -> dict[str, str]:
    """End the unfinished transactions of ``prefix``'s ids for sink partitions from
    ``first_partition`` on; returns each id's outcome ("rolled forward" or "aborted").
    ``two_phase``: the sink's commit mode (prepared transactions are looked for only then: a
    broker without two-phase commit refuses the producer that keeps one)."""
    outcomes: dict[str, str] = {}
    for transactional_id, partition in sorted(lingering_ids(consumer_settings, prefix).items()):
        if partition < first_partition:
            continue
        outcomes[transactional_id] = (
            _resolve_two_phase(producer_settings, consumer_settings, intent_topic, prefix, transactional_id)
            if two_phase else _abort(producer_settings, transactional_id))
    if outcomes:
        log.info("transactions left under %s: %s", prefix, outcomes)
    return outcomes


def _resolve_two_phase(producer_settings: Mapping[str, Any], consumer_settings: Mapping[str, Any],
                       intent_topic: str, prefix: str, transactional_id: str) -> str:
    try:
        with Producer(**producer_settings, transactional_id=transactional_id,
                      enable_two_phase_commit=True) as keeper:
            init_two_phase(keeper, transactional_id)
            outcome = resolve_kept_transaction(keeper, consumer_settings, intent_topic, prefix,
                                               transactional_id, 0.0)
            if outcome is not None:
                return outcome
    except InvalidTxnStateError:  # a per-task (not two-phase) transaction: it cannot be kept
        pass
    return _abort(producer_settings, transactional_id)


def _abort(producer_settings: Mapping[str, Any], transactional_id: str) -> str:
    """A plain transactional producer's initialisation aborts the id's open transaction."""
    with Producer(**producer_settings, transactional_id=transactional_id):
        return "aborted"
