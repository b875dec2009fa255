"""The data source Spark sees: ``spark.read/readStream/write/writeStream.format(FORMAT)``."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_integration.options import OptionError

#: The short name the data source is registered under.
FORMAT = "topicwright"

#: The columns of Spark's Kafka source; ``headers`` only with includeHeaders=true, as in Spark.
#: Here rather than beside the reading code: the Python workers that look the source up and make
#: it ask only for these, and need not load the SDK's consumer.
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int"
)
SCHEMA_WITH_HEADERS = SCHEMA + ", headers array<struct<key:string,value:binary>>"


class KafkaDataSource(DataSource):
    """Kafka topics through the topicwright SDK, with the options and columns of Spark's own
    Kafka source, and an exactly-once transactional sink."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        """Spark's Kafka source columns; ``headers`` only with ``includeHeaders=true``."""
        include = (self.options.get("includeHeaders") or "false").strip().lower()
        if include not in ("true", "false"):
            raise OptionError(f"option 'includeHeaders' must be true or false, not {include!r}")
        return SCHEMA_WITH_HEADERS if include == "true" else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_integration.reader import KafkaBatchReader

        return KafkaBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_integration.reader import KafkaStreamReader
        from spark_integration.requirements import MINIMUM_STREAMING, check_pyspark, installed_pyspark

        check_pyspark(installed_pyspark(), MINIMUM_STREAMING, "spark.readStream with spark_integration")
        return KafkaStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_integration.writer import KafkaBatchWriter

        _refuse_overwrite(overwrite)
        return KafkaBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_integration.writer import KafkaStreamWriter

        _refuse_overwrite(overwrite)
        return KafkaStreamWriter(self.options, schema)


def _refuse_overwrite(overwrite: bool) -> None:
    """Spark's Kafka sink appends only (a topic cannot be replaced): it refuses Overwrite (and
    Ignore, which PySpark refuses for Python data sources before asking)."""
    if overwrite:
        raise OptionError("Save mode Overwrite not allowed for Kafka. Allowed save modes are Append and "
                          "ErrorIfExists (default).")
