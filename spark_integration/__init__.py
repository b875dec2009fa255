"""PySpark helpers: read Kafka topics with Spark and write to them exactly once.

``register(spark)`` makes the data source available as ``spark.read.format(FORMAT)`` (and
``readStream``, ``write``, ``writeStream``); it is built on PySpark 4's Python Data Source API and
on the SDK's blocking clients, which run in Spark's Python workers.

The public names are resolved lazily (PEP 562): Spark starts a fresh Python worker for each step
of a query, and each one imports this package before the one module it needs
(``spark_integration.source``, ``.reader`` or ``.writer``), so the package itself loads no PySpark
and no SDK client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sdk._lazy import lazy_attributes
from spark_integration.requirements import check_pyspark, installed_pyspark

check_pyspark(installed_pyspark())

# Eager, unlike the rest: the function ``audit`` shadows its submodule's name, and must stay the
# package's attribute even after someone imports ``spark_integration.audit`` itself.
from spark_integration.audit import AuditReport, audit  # noqa: E402

if TYPE_CHECKING:
    from spark_integration.pipeline import PipelineResult, run_exactly_once
    from spark_integration.source import FORMAT, KafkaDataSource

#: Public name -> the module defining it.
_LAZY: dict[str, str] = {
    "PipelineResult": "spark_integration.pipeline",
    "run_exactly_once": "spark_integration.pipeline",
    "FORMAT": "spark_integration.source",
    "KafkaDataSource": "spark_integration.source",
}

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
    from spark_integration.source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
