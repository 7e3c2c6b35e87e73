"""Streams of the fjord format from option maps (Spark's builders take them one by one)."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter


def read_stream(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    reader = spark.readStream.format("fjord")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def write_stream(frame: DataFrame, options: Mapping[str, str]) -> DataStreamWriter:
    writer = frame.writeStream.format("fjord")
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def output_mode(frame: DataFrame) -> str:
    """How a streaming query's rows go to the sink: an aggregation's whole result at each
    trigger (`complete`: Python data sources take no `update`, and without a watermark
    `append` never ends an aggregate), any other query's rows once (`append`, the only mode
    stream-stream joins take)."""
    pending = [frame._jdf.queryExecution().analyzed()]
    while pending:
        node = pending.pop()
        if node.nodeName() == "Aggregate":
            return "complete"
        iterator = node.children().iterator()
        while iterator.hasNext():
            pending.append(iterator.next())
    return "append"
