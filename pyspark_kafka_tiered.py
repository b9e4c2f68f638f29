"""Registers the `kafka-tiered` data source with every SparkSession: PySpark imports the
top-level `pyspark_*` modules it finds and registers their `DefaultSource`."""

from engine.spark.source import KafkaTieredDataSource as DefaultSource

__all__ = ["DefaultSource"]
