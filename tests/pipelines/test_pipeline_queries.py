"""Legitimate transformations end to end, as a pipeline's run makes them (the checked query
over the streaming `source`, in the output mode the run gives it, written exactly once):
filters and projections, CTEs, a self-join of `source` and an aggregation."""

from __future__ import annotations

import pytest
from streaming_copy import copy_exactly_once, source_view
from test_spark_sink import committed_values
from test_spark_source import create_topic, produce, topic_name

from pipelines.spark.plan import checked_query
from pipelines.spark.streams import output_mode

pytestmark = pytest.mark.timeout(300)

RECORDS = [
    {"key": f"k{i % 3}".encode(), "value": f"r{i}".encode(), "partition": i % 2} for i in range(30)
]


@pytest.mark.parametrize(
    "transformation, expected",
    [
        (
            "SELECT key, upper(CAST(value AS STRING)) AS value FROM source WHERE key = 'k0'",
            sorted(f"R{i}" for i in range(0, 30, 3)),
        ),
        (
            "WITH k1 AS (SELECT key, value FROM source WHERE key = 'k1') "
            "SELECT key, concat(CAST(key AS STRING), ':', CAST(value AS STRING)) AS value FROM k1",
            sorted(f"k1:r{i}" for i in range(1, 30, 3)),
        ),
        (
            "SELECT l.key, concat(CAST(l.value AS STRING), '=', CAST(r.value AS STRING)) AS value "
            "FROM source l JOIN source r ON l.key = r.key AND l.offset = r.offset "
            "AND l.partition = r.partition WHERE l.key = 'k2'",
            sorted(f"r{i}=r{i}" for i in range(2, 30, 3)),
        ),
        (
            "SELECT key, CAST(count(*) AS STRING) AS value FROM source GROUP BY key",
            ["10", "10", "10"],
        ),
    ],
)
def test_a_checked_transformation_runs_exactly_once(
    spark, eos_broker, tmp_path, transformation, expected
):
    source, sink, prefix = topic_name("q-in"), topic_name("q-out"), topic_name("q")
    create_topic(eos_broker.bootstrap, source, partitions=2)
    create_topic(eos_broker.bootstrap, sink, partitions=1)
    produce(eos_broker.bootstrap, source, RECORDS)
    source_view(spark, eos_broker.bootstrap, source)
    transformed = checked_query(spark, transformation)
    copy_exactly_once(
        transformed,
        eos_broker.bootstrap,
        sink,
        prefix,
        tmp_path / "checkpoint",
        output_mode(transformed),
    )
    assert committed_values(spark, eos_broker.bootstrap, sink) == expected
