"""Exactly-once copy with our SDK as the copier, with copier and broker bounces (bounded form).

The scenario of Kafka's transactions system test, from benchmarks/eos_copy.py (whose long form is
benchmarks/eos_soak.py): 20k numbered records over 4 partitions are copied and transformed by
copier processes (our read_committed Consumer, our transactional Producer and the consumer's
offsets sent to each transaction); the copier process is killed with SIGKILL and restarted 3
times, and so is the broker, alternately, spread over the copy. A read_committed reader running
meanwhile must only ever see a prefix of the output per partition (nothing aborted or
uncommitted), and the final output must be exactly the transformed input: 0 duplicates, 0
missing, order kept per partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.eos_copy import BROKER_CONFIG, run_soak
from reference_broker.testing import BrokerProcess

PARTITIONS = 4
MESSAGES = 20_000
BOUNCES = 3


@pytest.fixture
def eos_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(config={**BROKER_CONFIG, "num.partitions": PARTITIONS}) as proc:
        yield proc


@pytest.mark.slow
def test_exactly_once_copy_survives_copier_and_broker_kills(
    eos_broker: BrokerProcess, tmp_path: Path
) -> None:
    result = run_soak(
        eos_broker,
        messages=MESSAGES,
        partitions=PARTITIONS,
        bounces=BOUNCES,
        copier="sdk",
        log_dir=tmp_path,
        timeout_s=90,
        # 200 transactions of 100 records: 6 s of pauses keep the copy under way for every bounce
        # (without them a fast machine copied the rest while the reader caught up after a kill).
        pause_ms=30,
    )
    copier_log = (tmp_path / "copier.log").read_text(errors="replace")[-3000:]
    assert (result.copier_kills, result.broker_kills) == (BOUNCES, BOUNCES), result
    # Every bounce landed while the copy was under way, not before it began or after it ended.
    assert len(result.bounced_at) == 2 * BOUNCES
    assert all(0 < at < MESSAGES for at in result.bounced_at), result
    assert result.copier_starts >= BOUNCES + 1
    # Our copier recovers by itself: it is never killed by the supervisor's watchdog for stalling.
    # (A copier started while the broker is down exits, NoBrokersAvailableError, and is restarted.)
    assert result.stall_kills == 0, (result, copier_log)
    assert result.reader_saw > 0
    assert result.reader_violations == 0, f"the concurrent reader saw aborted or uncommitted data: {result}"
    assert result.duplicates == 0, (result, copier_log)
    assert result.missing == 0, (result, copier_log)
    assert result.order_violations == 0, (result, copier_log)
