"""The SparkSession of a pipeline process (and of the tests): `local[*]` unless
FJORD_SPARK_MASTER names a cluster (spark://, k8s://, yarn), Python workers on this project's
interpreter, and the fjord format registered."""

from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession

from pipelines.spark.datasource import FjordDataSource

# py4j logs every connection it closes at INFO, from finalizers too, after logging is shut down.
logging.getLogger("py4j").setLevel(logging.WARNING)

# local[N,F]: F attempts a task, so that a failed task is retried in local mode as on a cluster.
DEFAULT_MASTER = "local[*,4]"


def spark_session(app_name: str, master: str | None = None, **conf: str) -> SparkSession:
    master = master or os.environ.get("FJORD_SPARK_MASTER") or DEFAULT_MASTER
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    builder = builder.config("spark.ui.enabled", "false")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if master.startswith("local"):
        # One machine: the driver stays on loopback instead of the first interface's address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    session.dataSource.register(FjordDataSource)
    return session
