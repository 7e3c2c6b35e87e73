"""Spark's side of Fjord's pipelines: the `fjord` data source and sink (PySpark Python data
sources with the options and columns of Spark's Kafka connector)."""

from pipelines.spark.datasource import FjordDataSource as FjordDataSource
