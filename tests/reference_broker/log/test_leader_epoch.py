"""LeaderEpochCache: Kafka's LeaderEpochFileCache rules and its checkpoint file format."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_broker.log.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    CheckpointFormatError,
    EpochEntry,
    LeaderEpochCache,
)


def test_assign_ignores_a_repeat_and_the_file_has_kafkas_format(tmp_path: Path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.assign(0, 0)
    assert not cache.assign(0, 5)  # same epoch, later offset: nothing to record
    assert cache.assign(3, 10)
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n3 10\n"
    assert LeaderEpochCache.read_file(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE) == [
        EpochEntry(0, 0), EpochEntry(3, 10)]


def test_assign_drops_entries_it_contradicts():
    cache = LeaderEpochCache(None, [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(4, 20)])
    assert cache.assign(3, 15)  # epoch 4 at 20 is above the new epoch: gone
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(3, 15)]
    assert cache.assign(5, 12)  # epoch 3 at 15 starts after the new start offset: gone
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(5, 12)]
    assert cache.assign(5, 11)  # the same epoch starting earlier moves back
    assert cache.entries[-1] == EpochEntry(5, 11)
    with pytest.raises(ValueError):
        cache.assign(-1, 3)


def test_end_offset_for_follows_kafkas_end_offset_for():
    cache = LeaderEpochCache(None, [EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(6, 25)])
    assert cache.end_offset_for(-1, 40) == (-1, -1)     # undefined epoch
    assert cache.end_offset_for(6, 40) == (6, 40)       # the latest: the log end offset
    assert cache.end_offset_for(3, 40) == (3, 25)       # known: the next epoch's start
    assert cache.end_offset_for(4, 40) == (3, 25)       # unknown, between: floor epoch
    assert cache.end_offset_for(2, 40) == (1, 10)
    assert cache.end_offset_for(0, 40) == (0, 0)        # older than every entry
    assert cache.end_offset_for(7, 40) == (-1, -1)      # newer than every entry
    assert LeaderEpochCache(None).end_offset_for(0, 5) == (-1, -1)


def test_truncate_from_end_and_start(tmp_path: Path):
    cache = LeaderEpochCache(tmp_path, [EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(6, 25)])
    cache.truncate_from_end(25)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(3, 10)]
    cache.truncate_from_end(30)  # nothing starts at or after it
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(3, 10)]
    cache.truncate_from_start(12)  # epoch 3 covers offset 12: it now starts there
    assert cache.entries == [EpochEntry(3, 12)]
    assert LeaderEpochCache.read_file(cache.path) == [EpochEntry(3, 12)]  # type: ignore[arg-type]
    cache.truncate_from_start(5)  # before every entry: unchanged
    assert cache.entries == [EpochEntry(3, 12)]


@pytest.mark.parametrize("text", [
    "", "0\n", "1\n0\n", "0\n2\n0 0\n", "0\n1\n0\n", "0\n1\na b\n", "0\n1\n-1 0\n",
])
def test_malformed_checkpoint_files_are_refused(tmp_path: Path, text: str):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text(text)
    with pytest.raises(CheckpointFormatError):
        LeaderEpochCache.read_file(path)
