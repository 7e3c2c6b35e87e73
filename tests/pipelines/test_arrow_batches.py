"""A source task's records as Arrow batches (pipelines/spark/source.py), no Spark needed."""

from __future__ import annotations

from broker.client.models import ConsumerRecord
from pipelines.spark.source import ARROW_BATCH_BYTES, arrow_batches


def test_a_partitions_records_become_arrow_batches_bounded_by_their_bytes():
    half = ARROW_BATCH_BYTES // 2
    sizes = [half, half, half, 3 * ARROW_BATCH_BYTES, 10, None]
    records = [
        ConsumerRecord("t", 2, offset, 1_000, 0, b"k", None if n is None else b"v" * n)
        for offset, n in enumerate(sizes)
    ]
    batches = list(arrow_batches(records, include_headers=False))
    # Two halves and their keys pass the bound, so each batch holds one half; an oversized
    # record has a batch of its own; every record is there once, in order.
    assert [b.num_rows for b in batches] == [1, 1, 1, 1, 2]
    rows = [row for b in batches for row in b.to_pylist()]
    assert [row["offset"] for row in rows] == list(range(6))
    assert {(row["topic"], row["partition"]) for row in rows} == {("t", 2)}
    assert rows[-1]["value"] is None
