"""The `fjord` format: Spark's Kafka connector (its options, its columns) over Fjord's client.

from pipelines.spark import FjordDataSource
spark.dataSource.register(FjordDataSource)
spark.readStream.format("fjord").option("kafka.bootstrap.servers", "host:9092")
    .option("subscribe", "events").load()
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from pipelines.spark.options import sink_options, source_options
from pipelines.spark.sink import FjordBatchWriter, FjordStreamWriter
from pipelines.spark.source import HEADERS_SCHEMA, SCHEMA, FjordBatchReader, FjordStreamReader


class FjordDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "fjord"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return HEADERS_SCHEMA if include else SCHEMA

    def reader(self, schema: StructType) -> FjordBatchReader:
        return FjordBatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> FjordStreamReader:
        return FjordStreamReader(source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> FjordBatchWriter:
        return FjordBatchWriter(sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> FjordStreamWriter:
        return FjordStreamWriter(sink_options(self.options), schema)
