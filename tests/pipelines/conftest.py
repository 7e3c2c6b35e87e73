"""One SparkSession for the whole test session (starting one costs seconds), and one broker
with two-phase commit on, which the exactly-once sink needs."""

from __future__ import annotations

import pytest
from broker_process import BrokerProcess


@pytest.fixture(scope="session")
def spark():
    from pipelines.spark.session import spark_session

    session = spark_session("fjord-tests", "local[2,2]", **{"spark.sql.shuffle.partitions": "2"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def eos_broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("spark-kafka-logs"), "transaction.two.phase.commit.enable=true"
    ).start()
    yield proc
    assert proc.stop() == 0, "".join(proc.output)
