"""One SparkSession for the whole test session (starting one costs seconds), and one broker
with two-phase commit on, which the exactly-once sink needs."""

from __future__ import annotations

import logging
import os
import sys

import pytest
from broker_process import BrokerProcess


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only, never the machine's address
    from pyspark.sql import SparkSession

    from pipelines.spark import FjordDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("fjord-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(FjordDataSource)
    yield session
    session.stop()
    # py4j logs its connections' close from finalizers, after pytest closed the streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def eos_broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("spark-kafka-logs"), "transaction.two.phase.commit.enable=true"
    ).start()
    yield proc
    assert proc.stop() == 0, "".join(proc.output)
