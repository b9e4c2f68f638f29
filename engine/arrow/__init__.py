"""Arrow readers of a tiered topic: a `pyarrow.RecordBatchReader` (and the Arrow PyCapsule
stream interface, `__arrow_c_stream__`) over the remote tier named by a broker config (its
RLMM and RSM) or over a bucket alone, with the schema of Spark's Kafka source. DuckDB and
Polars read it directly:

    from engine.arrow import read_topic
    stream = read_topic("events", bucket="s3://tiered/kafka/", store={...})
    duckdb.sql("select partition, count(*) from stream group by all")
    polars.DataFrame(read_topic("events", config="server.properties"))

Needs the `[arrow]` extra (pyarrow; duckdb and polars to query it).
"""

from engine.arrow.reader import TopicStream, read_topic, record_batch_reader

__all__ = ["TopicStream", "read_topic", "record_batch_reader"]
