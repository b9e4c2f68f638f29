"""`kafka-tiered`: a PySpark data source reading Kafka history straight from the remote
tier, with the schema and options of Spark's own Kafka source.

    spark.read.format("kafka-tiered").option("config", "server.properties")
         .option("subscribe", "events").load()

It is registered automatically when the package is installed (the top-level module
`pyspark_kafka_tiered` holds its DefaultSource), or explicitly with `register(spark)`.
Needs the `[spark]` extra (pyspark, pyarrow).
"""

from __future__ import annotations

__all__ = ["KafkaTieredDataSource", "register"]


def register(spark) -> None:
    """Registers the `kafka-tiered` source with a SparkSession."""
    from engine.spark.source import KafkaTieredDataSource

    spark.dataSource.register(KafkaTieredDataSource)


def __getattr__(name):
    if name == "KafkaTieredDataSource":
        from engine.spark.source import KafkaTieredDataSource

        return KafkaTieredDataSource
    raise AttributeError(name)
