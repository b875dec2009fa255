"""PySpark helpers: read Kafka topics with Spark and write to them exactly once.

``register(spark)`` makes the data source available as ``spark.read.format(FORMAT)`` (and
``readStream``, ``write``, ``writeStream``); it is built on PySpark 4's Python Data Source API and
on the SDK's blocking clients, which run in Spark's Python workers.
"""

from __future__ import annotations

from typing import Any

from spark_integration.requirements import check_pyspark, installed_pyspark

check_pyspark(installed_pyspark())

from spark_integration.audit import AuditReport, audit  # noqa: E402
from spark_integration.pipeline import PipelineResult, run_exactly_once  # noqa: E402
from spark_integration.source import FORMAT, KafkaDataSource  # noqa: E402

__all__ = [
    "FORMAT",
    "AuditReport",
    "KafkaDataSource",
    "PipelineResult",
    "audit",
    "register",
    "run_exactly_once",
]


def register(spark: Any) -> None:
    """Register the data source with ``spark`` (a ``SparkSession``) under ``FORMAT``."""
    spark.dataSource.register(KafkaDataSource)
