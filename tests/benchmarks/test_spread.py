"""The spread the benchmark tables print beside a median: never a value outside the runs.

``statistics.quantiles`` (its default, exclusive method) reaches past the data for few values:
two runs 0.5 and 4.0 give the quartiles -0.375 and 4.875, and a loaded machine's two-run
benchmark printed a negative lower quartile. Quartiles of a handful of runs mean little anyway,
so below ``QUARTILE_MIN_RUNS`` runs the spread is the smallest and the largest run.
"""

from __future__ import annotations

import importlib
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def scripts() -> Iterator[tuple[ModuleType, ModuleType]]:
    """``_common`` and ``bench_broker``, imported as the scripts import each other (by folder)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("_common"), importlib.import_module("bench_broker")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_two_runs_spread_from_the_smaller_to_the_larger(scripts: tuple[ModuleType, ModuleType]) -> None:
    common, _ = scripts
    assert common.spread([4.0, 0.5]) == (0.5, 4.0)
    assert common.spread_name(2) == "min-max"


def test_one_run_is_its_own_spread(scripts: tuple[ModuleType, ModuleType]) -> None:
    common, _ = scripts
    assert common.spread([1.25]) == (1.25, 1.25)


def test_many_runs_spread_over_their_quartiles(scripts: tuple[ModuleType, ModuleType]) -> None:
    common, _ = scripts
    assert common.spread([9.0, 1.0, 5.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0]) == (3.0, 7.0)
    assert common.spread_name(9) == "quartiles"


def test_no_runs_is_an_error(scripts: tuple[ModuleType, ModuleType]) -> None:
    common, _ = scripts
    with pytest.raises(ValueError, match="no runs"):
        common.spread([])


def test_the_spread_never_leaves_the_runs(scripts: tuple[ModuleType, ModuleType]) -> None:
    common, _ = scripts
    rng = random.Random(20)
    for size in range(1, 25):
        for _ in range(20):
            values = [rng.lognormvariate(0, 1) for _ in range(size)]
            low, high = common.spread(values)
            assert min(values) <= low <= high <= max(values), values


def test_paired_ratios_of_two_runs_stay_inside_the_ratios(scripts: tuple[ModuleType, ModuleType]) -> None:
    _, bench_broker = scripts
    paired = bench_broker.paired_ratios([50.0, 400.0], [100.0, 100.0])  # ratios 0.5 and 4.0
    assert (paired.low, paired.high) == (0.5, 4.0)
    assert (paired.wins, paired.runs) == (1, 2)
