"""A streaming copy as a pipeline's run makes one, for the tests of the `fjord` source and sink:
a topic read as the streaming view `source`, and a frame over it written exactly once to a
topic, every record there now, in as many batches as the source gives."""

from __future__ import annotations

from pathlib import Path


def source_view(spark, bootstrap: str, topic: str, **options: str) -> None:
    """The topic from its earliest offsets as the streaming view `source`."""
    reader = (
        spark.readStream.format("fjord")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    reader.load().createOrReplaceTempView("source")


def copy_exactly_once(
    frame, bootstrap: str, topic: str, prefix: str, checkpoint: Path, mode: str = "append"
):
    """`frame` written to `topic` by the fjord sink in exactlyOnce mode under transactional ids
    starting `prefix`, until the source has nothing more; the query, which ended without an
    error."""
    query = (
        frame.writeStream.format("fjord")
        .outputMode(mode)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", prefix)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return query
