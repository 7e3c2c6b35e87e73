"""`python -m pipelines.sql_checker`: the process that checks pipelines' transformations for the
control plane, so that no JVM starts inside a web or worker process (see `pipelines.sql`).

It reads one request a line on standard input, `{"sql": ..., "include_headers": ...}`, and
answers each with one line, `{"columns": [...]}` or `{"error": "..."}`, on what was standard
output; everything else it or its JVM prints goes to standard error. It exits when its input
closes, that is with the process that started it."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import TextIO

from pipelines.sql_policy import TransformationError


def transformation_columns(spark, sql: str, include_headers: bool) -> list[str]:
    """The columns the transformation gives over an empty `source`, once the policy, Spark's
    analyser and the sink have passed it; TransformationError otherwise."""
    from pipelines.spark.options import SinkOptions
    from pipelines.spark.plan import checked_query
    from pipelines.spark.sink import check_schema
    from pipelines.spark.source import HEADERS_SCHEMA, SCHEMA

    spark.createDataFrame(
        [], HEADERS_SCHEMA if include_headers else SCHEMA
    ).createOrReplaceTempView("source")
    schema = checked_query(spark, sql).schema
    try:
        # A pipeline writes only to its sink topic: a `topic` column is refused.
        sink = SinkOptions(None, "sink", False, None, pinned_topic=True)  # type: ignore[arg-type]
        check_schema(schema, sink)
    except ValueError as e:
        raise TransformationError(str(e)) from None
    return [field.name for field in schema.fields]


def serve(requests: TextIO, answers: TextIO) -> None:
    from pipelines.spark.session import spark_session

    # PySpark logs each failed analysis at ERROR level; here it is the user's mistake, answered.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    spark = spark_session("fjord-sql-check", "local[1]")
    spark.sparkContext.setLogLevel("ERROR")
    for line in requests:
        request = json.loads(line)
        try:
            answer = {
                "columns": transformation_columns(
                    spark, request["sql"], bool(request.get("include_headers"))
                )
            }
        except TransformationError as e:
            answer = {"error": str(e)}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def main() -> int:
    # Answers keep standard output to themselves: Spark's JVM, started later, inherits fd 1.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
