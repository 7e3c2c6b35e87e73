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
