"""The `kafka-tiered` Spark source over the object-store tier: a real local Spark session
whose tasks read a real S3 server (SeaweedFS) directly, through the RSM the properties name,
with no directory shared with the broker. Rows equal what `python -m engine fetch` returns."""

import uuid

import pytest
from spark_support import TieredCluster, arrow_rows, fetch_row, start_spark

TOPIC = "events"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server):
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": f"spark-{uuid.uuid4().hex[:8]}/",
             "rsm.config.chunk.size": "16384", "rsm.config.compression.enabled": "true"}
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    c = TieredCluster(tmp_path_factory.mktemp("spark-s3"), props)
    c.produce_and_tier(TOPIC, 2, 1500)
    return c


def test_spark_reads_the_object_store_tier(cluster):
    fetched = {p: cluster.fetch(TOPIC, p, 0) for p in (0, 1)}
    spark = start_spark(2)
    try:
        df = (spark.read.format("kafka-tiered").option("config", str(cluster.config))
              .option("subscribe", TOPIC).option("includeHeaders", "true").load())
        got = arrow_rows(df.toArrow())
    finally:
        spark.stop()
    want = sorted((fetch_row(TOPIC, p, r) for p in (0, 1) for r in fetched[p]),
                  key=lambda r: (r[3], r[4]))
    assert len(got) == len(want) == 3000
    assert got == want
    assert not any(cluster.tier_dir.iterdir())  # nothing went through a shared directory
