"""The pipeline the exactly-once crash test kills: a Spark streaming copy of a topic through a
transformation, read_committed, written by the fjord sink in exactlyOnce mode, in micro-batches
of at most MAX_OFFSETS records, resuming from its checkpoint when restarted. Runs until killed.

`python eos_pipeline.py <bootstrap> <source> <sink> <transactional id prefix> <checkpoint>`"""

from __future__ import annotations

import os
import sys

MAX_OFFSETS = 10_000


def main(bootstrap: str, source: str, sink: str, prefix: str, checkpoint: str) -> None:
    from pipelines.spark.options import exactly_once, read_committed
    from pipelines.spark.session import spark_session
    from pipelines.spark.streams import read_stream, write_stream

    # The sink's crash hook kills this process group, JVM and workers included.
    os.environ["FJORD_SINK_CRASH_PGID"] = str(os.getpgid(0))

    spark = spark_session("eos-pipeline", "local[2,2]", **{"spark.sql.shuffle.partitions": "2"})
    source_options = read_committed(
        bootstrap, source, startingOffsets="earliest", maxOffsetsPerTrigger=str(MAX_OFFSETS)
    )
    copied = read_stream(spark, source_options).selectExpr(
        "key", "concat(cast(value AS string), '!') AS value"
    )
    sink_options = exactly_once(bootstrap, sink, prefix, checkpoint)
    query = write_stream(copied, sink_options).trigger(processingTime="100 milliseconds").start()
    print("pipeline started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:6])
