"""The pipeline the exactly-once crash test kills: a Spark streaming copy of a topic through a
transformation, read_committed, written by the fjord sink in exactlyOnce mode, in micro-batches
of at most MAX_OFFSETS records, resuming from its checkpoint when restarted. Runs until killed.

`python eos_pipeline.py <bootstrap> <source> <sink> <transactional id prefix> <checkpoint>`"""

from __future__ import annotations

import os
import sys

MAX_OFFSETS = 10_000


def main(bootstrap: str, source: str, sink: str, prefix: str, checkpoint: str) -> None:
    from pipelines.spark.session import spark_session

    # The sink's crash hook kills this process group, JVM and workers included.
    os.environ["FJORD_SINK_CRASH_PGID"] = str(os.getpgid(0))

    spark = spark_session("eos-pipeline", "local[2,2]", **{"spark.sql.shuffle.partitions": "2"})
    copied = (
        spark.readStream.format("fjord")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("maxOffsetsPerTrigger", str(MAX_OFFSETS))
        .load()
        .selectExpr("key", "concat(cast(value AS string), '!') AS value")
    )
    query = (
        copied.writeStream.format("fjord")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", prefix)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    print("pipeline started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:6])
