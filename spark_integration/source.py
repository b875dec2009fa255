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

from spark_integration.kafka_ranges import SCHEMA

#: The short name the data source is registered under.
FORMAT = "topicwright"


class KafkaDataSource(DataSource):
    """Kafka topics through the topicwright SDK, with the options and columns of Spark's own
    Kafka source, and an exactly-once transactional sink."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_integration.reader import KafkaBatchReader

        return KafkaBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_integration.reader import KafkaStreamReader

        return KafkaStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_integration.writer import KafkaBatchWriter

        return KafkaBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_integration.writer import KafkaStreamWriter

        return KafkaStreamWriter(self.options, schema)
