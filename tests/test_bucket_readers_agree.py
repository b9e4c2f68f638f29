"""Every reader of a bucket agrees, for every kind of bucket, against a real S3 server
(SeaweedFS): the `kafka-tiered` Spark source on local[2] returns, row for row, what
`python -m engine fetch --json` returns for the same offsets (for a bucket assembled by
hand, the records written), and DuckDB and Polars over `engine.arrow.read_topic` count and
sum, per partition, what Spark returned. The buckets: written by the engine's object-store
tier plain, with zstd chunks (`compression.enabled`), with AES-GCM chunks
(`encryption.enabled`), with both, and encrypted under a key pair rotated half way; and one
assembled by hand with a retried upload, an old leader's divergent copy, a half-deleted
segment (a gap) and a second partition. A reader whose key ring lacks a pair the bucket
was written with refuses it, Spark as read_topic, rather than return fewer records."""

import json
import uuid
from dataclasses import dataclass, field

import duckdb
import polars as pl
import pytest
from bucket_support import HandBucket, expected_rows
from spark_support import TieredCluster, arrow_rows, fetch_row
from test_objectstore_transforms import write_key_pair

from engine.arrow import read_topic
from engine.errors import KafkaEngineError
from engine.remote.objectstore.store import ObjectStore, StoreConfig

TOPIC = "events"
RECORDS = 300  # per partition
CHUNK = 4096  # several chunks per segment, so reads start and end inside transformed chunks

# per bucket kind: compression, and the active key pair of each round of tiering (None:
# not encrypted). "k2" writes with the second pair, so a reader configured with k1 active
# must pick the pair each manifest names; "rotated" tiers half its records under k1, then
# the rest under k2
WRITTEN = {
    "plain": (False, (None,)),
    "zstd": (True, (None,)),
    "encrypted": (False, ("k1",)),
    "zstd+encrypted": (True, ("k2",)),
    "rotated": (False, ("k1", "k2")),
}
KINDS = [*WRITTEN, "hand"]
# offsets read by the bounded reads: inside segments and chunks, across the hand gap
STARTING = {0: 37, 1: 101}
ENDING = {0: 263}


@dataclass
class Bucket:
    kind: str
    topic: str
    url: str
    store: dict  # the readers' settings: store, and key pairs when encrypted
    want: list  # rows as fetch_row makes them, sorted by (partition, offset)
    fail_on_data_loss: bool = True
    closers: list = field(default_factory=list)


def encryption_settings(keys, active):
    """The plugin's encryption keys, every pair listed (names without `rsm.config.`)."""
    out = {"encryption.enabled": "true", "encryption.key.pair.id": active,
           "encryption.key.pairs": ",".join(keys)}
    for name, (public, private) in keys.items():
        out[f"encryption.key.pairs.{name}.public.key.file"] = public
        out[f"encryption.key.pairs.{name}.private.key.file"] = private
    return out


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    return {name: write_key_pair(d, name)[:2] for name in ("k1", "k2")}


def manifests(s3_server, prefix):
    store = ObjectStore(StoreConfig.from_configs(s3_server.config()))
    try:
        return [json.loads(store.get(o.key)) for o in store.list(prefix)
                if o.key.endswith(".rsm-manifest")]
    finally:
        store.close()


def tier_settings(s3_server, prefix, compression, key_pair, keys) -> dict:
    """What the broker's tier writes with (names without `rsm.config.`)."""
    out = {"key.prefix": prefix, "chunk.size": str(CHUNK),
           "compression.enabled": str(compression).lower(), **s3_server.config()}
    if key_pair:
        out.update(encryption_settings(keys, key_pair))
    return out


def store_settings(s3_server) -> dict:
    return {k: v for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"}


def engine_bucket(kind, s3_server, keys, base) -> Bucket:
    compression, rounds = WRITTEN[kind]
    prefix = f"agree-{kind.replace('+', '-')}-{uuid.uuid4().hex[:8]}/"
    for key_pair in rounds:  # the same logs and topic id each round, as one broker's
        c = TieredCluster(base, {
            "remote.log.storage.manager.class.name":
                "io.aiven.kafka.tieredstorage.RemoteStorageManager",
            **{f"rsm.config.{k}": v for k, v in
               tier_settings(s3_server, prefix, compression, key_pair, keys).items()}})
        # uncompressed batches, so the tier's zstd has something to compress
        c.produce_and_tier(TOPIC, 2, RECORDS // len(rounds), codec="none",
                           segment_bytes=32 << 10)
    # the bucket holds what its kind says, or the comparisons below prove nothing
    found = manifests(s3_server, prefix)
    assert len(found) >= 4  # several segments per partition
    assert {m["compression"] for m in found} == {compression}
    assert {m.get("encryption", {}).get("dataKey", "").split(":")[0] for m in found} == {
        key_pair or "" for key_pair in rounds}
    assert all(m["chunkIndex"]["originalFileSize"] > 2 * CHUNK for m in found)
    # fetch reads through the broker's tier (RLMM, and the last round's key ring: both pairs)
    want = sorted((fetch_row(TOPIC, p, r) for p in (0, 1) for r in c.fetch(TOPIC, p, 0)),
                  key=lambda r: (r[3], r[4]))
    assert {r[3] for r in want} == {0, 1} and len(want) == 2 * RECORDS
    # readers get the store and, for an encrypted bucket, the key ring with k1 active: never
    # the tier's compression setting (a reader learns it from each manifest)
    store = store_settings(s3_server)
    if rounds != (None,):
        store.update(encryption_settings(keys, "k1"))
    return Bucket(kind, TOPIC, f"s3://{s3_server.buckets[0]}/{prefix}", store, want)


def hand_bucket(s3_server) -> Bucket:
    hand = HandBucket(s3_server)
    # partition 0, as test_arrow_reader's hand-built bucket but with multi-chunk segments
    hand.segment(0, 99, [(0, 0)])
    hand.segment(0, 99, [(0, 0)])                                   # a retried upload
    hand.segment(100, 199, [(0, 0)], leader="old-")                 # the old leader's copy
    hand.segment(100, 249, [(0, 0), (1, 150)])                      # the new leader's
    hand.segment(250, 279, [(0, 0), (1, 150)], objects=("indexes", "rsm-manifest"))  # half gone
    hand.segment(280, 359, [(0, 0), (1, 150)])
    # partition 1: two segments, three epochs
    hand.segment(0, 149, [(0, 0), (2, 90)], partition=1)
    hand.segment(150, 299, [(0, 0), (2, 90), (5, 200)], partition=1)
    want = expected_rows([(0, 249), (280, 359)]) + expected_rows([(0, 299)], partition=1)
    return Bucket("hand", hand.topic, hand.url, hand.settings, want, fail_on_data_loss=False,
                  closers=[hand.close])


@pytest.fixture(scope="module")
def buckets(s3_server, keys, tmp_path_factory):
    """kind -> Bucket, each written once, when first asked for (the key-ring tests reuse
    the encrypted ones)."""
    made = {}

    def get(kind) -> Bucket:
        if kind not in made:
            made[kind] = (hand_bucket(s3_server) if kind == "hand" else engine_bucket(
                kind, s3_server, keys, tmp_path_factory.mktemp(f"agree-{kind}")))
        return made[kind]

    yield get
    for b in made.values():
        for close in b.closers:
            close()


@pytest.fixture(scope="module", params=KINDS)
def bucket(request, buckets):
    return buckets(request.param)


def spark_read(spark, b: Bucket, **options):
    reader = (spark.read.format("kafka-tiered").option("bucket", b.url)
              .option("subscribe", b.topic).option("includeHeaders", "true")
              .option("failOnDataLoss", str(b.fail_on_data_loss).lower())
              .option("maxBytesPerPartition", "8192"))  # many tasks for the two cores
    for k, v in {**b.store, **options}.items():
        reader = reader.option(k, v)
    return arrow_rows(reader.load().toArrow())


@pytest.fixture(scope="module")
def spark_rows(spark, bucket):
    return spark_read(spark, bucket)


def aggregates(rows) -> dict:
    """Per partition: (records, sum of offsets, value bytes, min and max timestamp ms)."""
    out = {}
    for _, value, _, p, offset, ts, *_ in rows:
        n, offsets, size, lo, hi = out.get(p, (0, 0, 0, ts, ts))
        out[p] = (n + 1, offsets + offset, size + len(value), min(lo, ts), max(hi, ts))
    return out


def topic_stream(b: Bucket, **options):
    return read_topic(b.topic, bucket=b.url, store=b.store,
                      fail_on_data_loss=b.fail_on_data_loss, **options)


def test_spark_rows_equal_fetch(bucket, spark_rows):
    assert len(spark_rows) == len(bucket.want)
    assert spark_rows == bucket.want


def test_spark_rows_of_bounded_offsets_equal_fetch_of_the_same_offsets(spark, bucket):
    got = spark_read(spark, bucket,
                     startingOffsets=json.dumps({bucket.topic: STARTING}),
                     endingOffsets=json.dumps({bucket.topic: ENDING}))
    want = [r for r in bucket.want
            if STARTING[r[3]] <= r[4] < ENDING.get(r[3], float("inf"))]
    assert {r[3] for r in want} == {0, 1}
    assert got == want


def test_duckdb_aggregates_equal_spark(bucket, spark_rows):
    with topic_stream(bucket) as stream:  # noqa: F841 (DuckDB finds it by name)
        got = duckdb.sql(
            'select "partition", count(*), sum("offset"), sum(octet_length("value")), '
            'epoch_ms(min("timestamp")), epoch_ms(max("timestamp")) from stream '
            "group by all order by 1").fetchall()
    assert {p: tuple(rest) for p, *rest in got} == aggregates(spark_rows)


def test_polars_aggregates_equal_spark(bucket, spark_rows):
    with topic_stream(bucket) as stream:
        df = pl.DataFrame(stream)  # the PyCapsule stream interface
    ts = pl.col("timestamp")
    agg = df.group_by("partition").agg(
        pl.len(), pl.col("offset").sum(), pl.col("value").bin.size().sum(),
        ts.min().dt.epoch("ms").alias("first"), ts.max().dt.epoch("ms").alias("last")
    ).sort("partition")
    assert {p: tuple(rest) for p, *rest in agg.iter_rows()} == aggregates(spark_rows)


# a key ring holding k2 only: the encrypted bucket was written under k1, the rotated one's
# first half too. Whatever the error, it must name the missing pair and stop the read:
# fewer records than the topic holds, with a warning, is what failOnDataLoss=true forbids
def lacking_k1(b: Bucket, keys, s3_server) -> Bucket:
    return Bucket(b.kind, b.topic, b.url, {**store_settings(s3_server),
                                           **encryption_settings({"k2": keys["k2"]}, "k2")},
                  b.want)


def refused(read, b: Bucket, errors) -> None:
    try:
        rows = read()
    except errors as exc:
        assert "key pair 'k1'" in str(exc)
    else:
        pytest.fail(f"{len(rows)} of the {len(b.want)} records read, and no error",
                    pytrace=False)


@pytest.mark.parametrize("kind", ["encrypted", "rotated"])
def test_read_topic_refuses_a_bucket_written_under_a_key_pair_it_lacks(buckets, keys,
                                                                       s3_server, kind):
    b = lacking_k1(buckets(kind), keys, s3_server)

    def read():
        with topic_stream(b, columns=["offset"]) as stream:
            return stream.read_all().column("offset").to_pylist()

    refused(read, b, KafkaEngineError)


@pytest.mark.parametrize("kind", ["encrypted", "rotated"])
def test_spark_refuses_a_bucket_written_under_a_key_pair_it_lacks(spark, buckets, keys,
                                                                  s3_server, kind):
    b = lacking_k1(buckets(kind), keys, s3_server)
    from pyspark.errors import PySparkException

    refused(lambda: spark_read(spark, b), b, PySparkException)  # Spark wraps the engine's


def test_a_data_key_that_does_not_unwrap_is_a_damaged_segment(buckets, keys, s3_server):
    """Unlike a key pair the reader lacks, a pair that is there but does not unwrap a
    segment's data key (another key under the same id, or a damaged dataKey) is that
    segment's damage: the rotated bucket's k1 half is lost data at the partition's start,
    failing the read naming the pair, and with failOnDataLoss=false exactly the k2 half
    is read."""
    rotated = buckets("rotated")
    wrong = {**store_settings(s3_server),
             **encryption_settings({"k1": keys["k2"], "k2": keys["k2"]}, "k2")}
    b = Bucket(rotated.kind, rotated.topic, rotated.url, wrong, rotated.want)
    with (pytest.raises(KafkaEngineError, match=r"key pair 'k1' does not unwrap"),
          topic_stream(b, include_headers=True) as stream):
        stream.read_all()
    b.fail_on_data_loss = False
    with topic_stream(b, include_headers=True) as stream:
        got = arrow_rows(stream.read_all())
    for p in (0, 1):
        mine = [r for r in got if r[3] == p]
        want = [r for r in rotated.want if r[3] == p]
        assert 0 < len(mine) < len(want) and mine == want[len(want) - len(mine):]
