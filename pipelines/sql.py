"""A pipeline's transformation checked before it is saved: parsed and analysed by Spark against
the source's columns (the view `source`, empty), and its result checked against what the sink
takes. Spark is started in this process on first use (a local session, a few seconds) and kept
for the next check."""

from __future__ import annotations

import logging
import threading

from pipelines.spark.options import SinkOptions
from pipelines.spark.source import HEADERS_SCHEMA, SCHEMA

_lock = threading.Lock()
# PySpark logs each failed analysis at ERROR level; here it is the user's mistake, answered as such.
logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)


class TransformationError(ValueError):
    """Spark's reason, or the sink's, why a transformation cannot run."""


def check_transformation(sql: str, include_headers: bool = False) -> list[str]:
    """The columns the transformation gives, or TransformationError."""
    from pyspark.errors import PySparkException

    from pipelines.spark.session import spark_session
    from pipelines.spark.sink import check_schema

    with _lock:  # the view `source` is per session: one check at a time
        spark = spark_session("fjord-sql-check", "local[1]")
        spark.createDataFrame(
            [], HEADERS_SCHEMA if include_headers else SCHEMA
        ).createOrReplaceTempView("source")
        try:
            schema = spark.sql(sql).schema
        except PySparkException as e:
            raise TransformationError(_first_line(str(e))) from None
    try:
        check_schema(schema, SinkOptions(None, "sink", False, None))  # type: ignore[arg-type]
    except ValueError as e:
        raise TransformationError(str(e)) from None
    return [field.name for field in schema.fields]


def _first_line(message: str) -> str:
    """Spark's message without the plan it appends."""
    return message.strip().split("\n")[0][:1000]
