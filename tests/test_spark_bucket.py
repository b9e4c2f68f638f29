"""The `kafka-tiered` Spark source reading a bucket alone (`.option("bucket", ...)`): a real
local[2] Spark session whose tasks range-read a real S3 server (SeaweedFS) with no broker
config and no RLMM. Rows equal `python -m engine fetch --json` for a bucket the engine
tiered, and the records written for a bucket assembled by hand; offsets missing from the
bucket follow failOnDataLoss."""

import uuid

import pytest
from bucket_support import HandBucket, expected_rows
from spark_support import StreamSink, TieredCluster, arrow_rows, fetch_row

TOPIC = "events"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server):
    prefix = f"spark-bucket-{uuid.uuid4().hex[:8]}/"
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": prefix, "rsm.config.chunk.size": "16384"}
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    c = TieredCluster(tmp_path_factory.mktemp("spark-bucket"), props)
    c.produce_and_tier(TOPIC, 2, 1200)
    c.bucket_url = f"s3://{s3_server.buckets[0]}/{prefix}"
    return c


def bucket_reader(spark, url, settings):
    reader = spark.read.format("kafka-tiered").option("bucket", url)
    for k, v in settings.items():
        reader = reader.option(k, v)
    return reader


def test_spark_reads_a_bucket_alone(spark, cluster, s3_server):
    settings = {k: v for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"}
    df = (bucket_reader(spark, cluster.bucket_url, settings).option("subscribe", TOPIC)
          .option("includeHeaders", "true").option("maxBytesPerPartition", "65536").load())
    got = arrow_rows(df.toArrow())
    fetched = {p: cluster.fetch(TOPIC, p, 0) for p in (0, 1)}
    want = sorted((fetch_row(TOPIC, p, r) for p in (0, 1) for r in fetched[p]),
                  key=lambda r: (r[3], r[4]))
    assert len(got) == len(want) == 2400
    assert got == want
    assert not any(cluster.tier_dir.iterdir())
    # the broker file's rsm.config.* keys can give the store instead of options
    df = (spark.read.format("kafka-tiered").option("bucket", cluster.bucket_url)
          .option("config", str(cluster.config)).option("subscribe", TOPIC)
          .option("startingOffsets", '{"events": {"1": 100}}').load())
    assert df.filter("partition = 1").count() == sum(r["offset"] >= 100 for r in fetched[1])


def test_spark_on_a_bucket_with_a_gap_follows_fail_on_data_loss(spark, s3_server):
    hand = HandBucket(s3_server)
    try:
        hand.segment(0, 9, [(0, 0)])
        hand.segment(0, 9, [(0, 0)])                       # a retried upload
        hand.segment(10, 19, [(0, 0)], leader="old-")      # a divergent old leader
        hand.segment(10, 24, [(0, 0), (1, 15)])
        hand.segment(30, 39, [(0, 0), (1, 15)])            # offsets 25-29 are gone
        with pytest.raises(Exception, match=r"hand-0: offsets 25-29"):
            bucket_reader(spark, hand.url, hand.settings).option("subscribe", "hand").load() \
                .collect()
        df = (bucket_reader(spark, hand.url, hand.settings).option("subscribe", "hand")
              .option("includeHeaders", "true").option("failOnDataLoss", "false").load())
        assert arrow_rows(df.toArrow()) == expected_rows([(0, 24), (30, 39)])
    finally:
        hand.close()


def test_export_reads_a_bucket_alone(cluster, s3_server, tmp_path):
    import os
    import subprocess
    import sys

    import pyarrow.dataset as pads
    from spark_support import REPO, spark_env

    store = [a for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"
             for a in ("--store", f"{k}={v}")]
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "engine", "export", "--master", "local[2]",
                          "--bucket", cluster.bucket_url, *store, "--topic", TOPIC,
                          "--out", str(out), "--max-bytes-per-round", str(64 << 10)],
                         cwd=REPO, env={**os.environ, **spark_env()}, capture_output=True,
                         text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "round 2:" in run.stdout  # several committed rounds
    files = sorted(map(str, out.glob("partition=*/date=*/*.parquet")))
    table = pads.dataset(files, format="parquet", partitioning="hive",
                         partition_base_dir=str(out)).to_table()
    want = sorted((fetch_row(TOPIC, p, r, headers=False) for p in (0, 1)
                   for r in cluster.fetch(TOPIC, p, 0)), key=lambda r: (r[3], r[4]))
    assert arrow_rows(table.drop_columns(["date"])) == want
    bad = subprocess.run([sys.executable, "-m", "engine", "export", "--topic", TOPIC,
                          "--out", str(tmp_path / "x")], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")


def test_spark_reads_only_what_the_remote_log_metadata_lists(spark, s3_server, tmp_path):
    from test_bucket_metadata import added, moved, write_metadata

    from engine.remote.metadata import RemoteLogSegmentState as S

    hand = HandBucket(s3_server)
    try:
        a = hand.segment(0, 9, [(0, 0)])
        b = hand.segment(10, 19, [(0, 0)])
        hand.segment(20, 29, [(0, 0)])                     # not in the metadata
        events = []
        for s in (a, b):
            m = added(hand, s)
            events += [m, *moved(m, S.COPY_SEGMENT_FINISHED)]
        write_metadata(tmp_path / "logs", "kafka", events, {("hand", 0): 4})
        df = (bucket_reader(spark, hand.url, hand.settings).option("subscribe", "hand")
              .option("includeHeaders", "true")
              .option("remoteLogMetadataPath", str(tmp_path / "logs")).load())
        assert arrow_rows(df.toArrow()) == expected_rows([(4, 19)])
    finally:
        hand.close()


def test_streaming_from_a_bucket_reads_segments_listed_while_it_runs(spark, s3_server,
                                                                     tmp_path):
    """Each micro-batch lists the bucket anew: segments uploaded while the query runs, and
    while it is stopped, are read once each (restart from the checkpoint), equal to fetch."""
    prefix = f"spark-stream-{uuid.uuid4().hex[:8]}/"
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": prefix, "rsm.config.chunk.size": "16384",
             "rsm.config.compression.enabled": "true"}
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    cluster = TieredCluster(tmp_path / "cluster", props)
    cluster.produce_and_tier("stream", 2, 400, seed=11)
    url = f"s3://{s3_server.buckets[0]}/{prefix}"
    settings = {k: v for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"}
    sink = StreamSink(tmp_path)

    def start(trigger):
        reader = spark.readStream.format("kafka-tiered").option("bucket", url)
        for k, v in settings.items():
            reader = reader.option(k, v)
        return sink.start(reader.option("subscribe", "stream")
                          .option("startingOffsets", "earliest")
                          .option("includeHeaders", "true").load(), trigger)

    query = start({"processingTime": "500 milliseconds"})
    try:
        sink.wait_for(800)
        cluster.produce_and_tier("stream", 2, 300, seed=12)  # uploaded while it runs
        sink.wait_for(1400)
    finally:
        query.stop()
    cluster.produce_and_tier("stream", 2, 200, seed=13)  # uploaded while it is stopped
    query = start({"availableNow": True})
    query.awaitTermination(120)
    query.stop()

    got = sink.offsets()
    assert len(got) == len(set(got)) == 1800
    want = sorted((fetch_row("stream", p, r) for p in (0, 1)
                   for r in cluster.fetch("stream", p, 0)), key=lambda r: (r[3], r[4]))
    assert arrow_rows(sink.table()) == want
    assert not any(cluster.tier_dir.iterdir())  # the bucket only: no filesystem tier
