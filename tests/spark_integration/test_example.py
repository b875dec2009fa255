"""examples/spark_pipeline.py, run on the shared session: its audit must come out clean."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def test_spark_pipeline_example_copies_exactly_once(spark: Any, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("spark_pipeline", ROOT / "examples" / "spark_pipeline.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    report = example.demo(spark, 1500, tmp_path)
    assert report.ok, report
    assert report.input_records == report.output_records == 3000
