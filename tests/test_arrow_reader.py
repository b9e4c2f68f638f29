"""engine.arrow: a tiered topic as Arrow record batches (pyarrow, DuckDB, Polars), from a
broker config (RLMM + RSM) or from the bucket alone, against a real S3 server (SeaweedFS).
Rows equal `python -m engine fetch --json` for the broker's tier, and the records written
for a bucket assembled by hand."""

import uuid

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from bucket_support import TS0, HandBucket, expected_rows
from spark_support import TieredCluster, arrow_rows, fetch_row

from engine.arrow import read_topic, record_batch_reader
from engine.config import ConfigError
from engine.errors import OffsetOutOfRangeError
from engine.remote.bucket import Bucket, RemoteDataLossError

TOPIC = "events"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server):
    prefix = f"arrow-{uuid.uuid4().hex[:8]}/"
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": prefix,
             "rsm.config.chunk.size": "16384", "rsm.config.compression.enabled": "true"}
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    c = TieredCluster(tmp_path_factory.mktemp("arrow-s3"), props)
    c.produce_and_tier(TOPIC, 2, 1500)
    c.bucket_url = f"s3://{s3_server.buckets[0]}/{prefix}"
    c.fetched = {p: c.fetch(TOPIC, p, 0) for p in (0, 1)}
    c.store = {k: v for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"}
    return c


def fetched_rows(cluster, partitions=(0, 1), lo=0, hi=None):
    return sorted((fetch_row(TOPIC, p, r) for p in partitions for r in cluster.fetched[p]
                   if r["offset"] >= lo and (hi is None or r["offset"] < hi)),
                  key=lambda r: (r[3], r[4]))


@pytest.fixture
def hand(s3_server):
    b = HandBucket(s3_server)
    yield b
    b.close()


def test_a_broker_config_source_equals_fetch(cluster):
    with read_topic(TOPIC, config=cluster.config, include_headers=True) as stream:
        got = arrow_rows(stream.read_all())
    want = fetched_rows(cluster)
    assert len(got) == len(want) == 3000
    assert got == want


def test_a_bucket_source_equals_fetch_and_the_rlmm_lineage(cluster):
    with read_topic(TOPIC, bucket=cluster.bucket_url, store=cluster.store,
                    include_headers=True) as stream:
        got = arrow_rows(stream.read_all())
    assert got == fetched_rows(cluster)
    from engine.scan.tier import Tier

    with Tier(cluster.props) as tier, Bucket(cluster.bucket_url, cluster.store) as bucket:
        for (topic, p), tip in tier.partitions().items():
            view = bucket.partition(bucket.partitions()[(topic, p)])
            assert view.skipped == [] and view.gaps == []
            assert [(link.segment.remote_log_segment_id, link.start_offset, link.end)
                    for link in view.chain] == [
                (link.segment.remote_log_segment_id, link.start_offset, link.end)
                for link in tier.chain(tip)]
            rlmm = {link.segment.remote_log_segment_id: link.segment
                    for link in tier.chain(tip)}
            for link in view.chain:
                want = rlmm[link.segment.remote_log_segment_id]
                assert link.segment.end_offset == want.end_offset
                assert link.segment.segment_size_in_bytes == want.segment_size_in_bytes
                assert link.segment.segment_leader_epochs == want.segment_leader_epochs


def test_the_broker_file_can_name_the_store_of_a_bucket(cluster):
    # the rsm.config.* keys of the broker file give the store; the RLMM is not used
    with read_topic(TOPIC, bucket=cluster.bucket_url, config=cluster.config,
                    partitions=[1], columns=["offset"]) as stream:
        offsets = stream.read_all().column("offset").to_pylist()
    assert offsets == [r["offset"] for r in cluster.fetched[1]]


def test_duckdb_and_polars_read_the_stream(cluster):
    want = {p: (len(cluster.fetched[p]), sum(r["offset"] for r in cluster.fetched[p]))
            for p in (0, 1)}
    with read_topic(TOPIC, bucket=cluster.bucket_url, store=cluster.store) as stream:
        got = duckdb.sql('select "partition", count(*), sum("offset") from stream '
                         'group by all order by 1').fetchall()
        assert {p: (n, s) for p, n, s in got} == want
        reader = stream.to_reader()  # noqa: F841 (DuckDB finds it by name)
        assert duckdb.sql("select count(*) from reader").fetchall() == [(3000,)]
        df = pl.DataFrame(stream)  # the PyCapsule stream interface
        agg = df.group_by("partition").agg(pl.len(), pl.col("offset").sum()).sort("partition")
        assert {r[0]: (r[1], r[2]) for r in agg.iter_rows()} == want
        assert df.schema["timestamp"] == pl.Datetime("us", "UTC")
        values = pl.from_arrow(stream.to_reader())["value"].to_list()
    assert sorted(values) == sorted(r[1] for r in fetched_rows(cluster))


# per partition: records, value bytes and a digest of the values in offset order
PER_PARTITION = ('select "partition", count(*), sum(octet_length("value")), '
                 """md5(string_agg(hex("value"), '' order by "offset")) from stream """
                 "group by all order by 1")


def test_views_equal_copies_and_duckdb_and_polars_take_them(cluster):
    """views=True: keys, values and headers as view types into the bytes read, equal to the
    copied columns; DuckDB and Polars consume the view stream as they do the copied one."""
    options = dict(bucket=cluster.bucket_url, store=cluster.store, include_headers=True)
    with read_topic(TOPIC, views=True, **options) as stream:
        table = stream.read_all()
        assert table.schema.field("key").type == pa.binary_view()
        assert table.schema.field("value").type == pa.binary_view()
        assert table.schema.field("headers").type == pa.list_(
            pa.struct([("key", pa.string_view()), ("value", pa.binary_view())]))
        table.validate(full=True)
        assert arrow_rows(table) == fetched_rows(cluster)
        got = duckdb.sql(PER_PARTITION).fetchall()
        df = pl.DataFrame(stream)
    with read_topic(TOPIC, **options) as stream:
        want = duckdb.sql(PER_PARTITION).fetchall()
    assert got == want and sum(row[1] for row in got) == 3000
    assert sorted(df["value"].to_list()) == sorted(r[1] for r in fetched_rows(cluster))
    assert sorted(df["key"].to_list(), key=repr) == sorted(
        (r[0] for r in fetched_rows(cluster)), key=repr)


def test_bounds_and_column_selection(cluster):
    stream = read_topic(TOPIC, config=cluster.config, partitions=[1], starting_offsets=100,
                        ending_offsets={1: 400}, columns=["value", "offset", "partition"])
    with stream:
        reader = stream.to_reader()
        assert isinstance(reader, pa.RecordBatchReader)
        assert reader.schema.names == ["value", "offset", "partition"]
        table = reader.read_all()
    want = fetched_rows(cluster, (1,), 100, 400)
    assert table.column("offset").to_pylist() == [r[4] for r in want]
    assert table.column("value").to_pylist() == [r[1] for r in want]
    assert set(table.column("partition").to_pylist()) == {1}


def test_record_bytes_of_columns_not_asked_for_are_not_copied(cluster, monkeypatch):
    from engine.records import MemoryRecords

    decoded = []
    decode = MemoryRecords.decode_columns

    def spy(self, *args, **kwargs):
        decoded.append(decode(self, *args, **kwargs))
        return decoded[-1]

    monkeypatch.setattr(MemoryRecords, "decode_columns", spy)
    with read_topic(TOPIC, config=cluster.config, partitions=[0],
                    columns=["offset", "timestamp"]) as stream:
        assert stream.read_all().column("offset").to_pylist() == [
            r["offset"] for r in cluster.fetched[0]]
    assert decoded and not any(k in cols._c for cols in decoded
                               for k in ("key_data", "value_data", "header_key_data"))
    decoded.clear()
    with read_topic(TOPIC, config=cluster.config, partitions=[0], columns=["value"]) as stream:
        stream.read_all()
    assert all("value_data" in c._c and "key_data" not in c._c for c in decoded)


def test_timestamp_bounds_keep_the_records_in_range(cluster):
    ts = [r["timestamp"] for r in cluster.fetched[0]]
    lo, hi = sorted(ts)[len(ts) // 3], sorted(ts)[2 * len(ts) // 3]
    table = record_batch_reader(TOPIC, bucket=cluster.bucket_url, store=cluster.store,
                                partitions=[0], start_timestamp=lo, end_timestamp=hi,
                                columns=["offset"]).read_all()
    assert table.column("offset").to_pylist() == [
        r["offset"] for r in cluster.fetched[0] if lo <= r["timestamp"] < hi]


def test_bad_requests_are_clear_errors(cluster, hand):
    with pytest.raises(ConfigError, match="columns"):
        read_topic(TOPIC, config=cluster.config, columns=["offset", "nope"])
    with pytest.raises(ConfigError, match="no such topic"):
        read_topic("nope", config=cluster.config)
    with pytest.raises(ConfigError, match="partitions"):
        read_topic(TOPIC, config=cluster.config, partitions=[7])
    with pytest.raises(OffsetOutOfRangeError, match="events-0"):
        read_topic(TOPIC, config=cluster.config, partitions=[0], ending_offsets=10**9)
    with pytest.raises(ConfigError, match="bucket"):
        read_topic(TOPIC, bucket="not-a-url")
    with pytest.raises(ConfigError, match="config"):
        read_topic(TOPIC)
    with pytest.raises(ConfigError, match="isolation_level"):
        read_topic(TOPIC, config=cluster.config, isolation_level="READ_COMMITTED")


@pytest.mark.parametrize("source", ["config", "bucket"])
def test_read_committed_equals_fetch_read_committed(cluster, source):
    where = {"config": cluster.config} if source == "config" else {
        "bucket": cluster.bucket_url, "store": cluster.store}
    with read_topic(TOPIC, include_headers=True, isolation_level="read_committed",
                    **where) as stream:
        got = arrow_rows(stream.read_all())
    want = sorted((fetch_row(TOPIC, p, r) for p in (0, 1)
                   for r in cluster.fetch(TOPIC, p, 0, read_committed=True)),
                  key=lambda r: (r[3], r[4]))
    assert got == want
    assert len(want) < len(fetched_rows(cluster))  # the topic has aborted transactions


def test_read_committed_stops_at_a_transaction_whose_marker_is_not_tiered(tmp_path):
    c = TieredCluster(tmp_path)
    c.tier_with_marker_untiered("txn")
    every = read_topic("txn", config=c.config, columns=["offset", "value"]).read_all()
    assert every.column("offset").to_pylist() == list(range(8))  # 3 records of the open txn
    committed = read_topic("txn", config=c.config, columns=["offset", "value"],
                           isolation_level="read_committed").read_all()
    assert committed.column("value").to_pylist() == [b"committed-%d" % i for i in range(5)]
    assert [r["offset"] for r in c.fetch("txn", 0, 0, read_committed=True)] == list(range(5))
    later = read_topic("txn", config=c.config, starting_offsets=6,
                       isolation_level="read_committed").read_all()
    assert later.num_rows == 0  # past the last stable offset: nothing yet


def test_a_hand_built_bucket_reads_as_a_consumer_would(hand):
    hand.segment(0, 9, [(0, 0)])
    hand.segment(0, 9, [(0, 0)])                                   # a retried upload
    hand.segment(10, 19, [(0, 0)], leader="old-")                  # the old leader's copy
    hand.segment(10, 24, [(0, 0), (1, 15)])                        # the new leader's
    hand.segment(25, 29, [(0, 0), (1, 15)], objects=("indexes", "rsm-manifest"))  # half gone
    hand.segment(30, 39, [(0, 0), (1, 15)])
    with pytest.raises(RemoteDataLossError, match=r"hand-0: offsets 25-29") as info:
        read_topic("hand", bucket=hand.url, store=hand.settings)
    assert info.value.missing == ((25, 29),)
    with read_topic("hand", bucket=hand.url, store=hand.settings, include_headers=True,
                    fail_on_data_loss=False) as stream:
        got = arrow_rows(stream.read_all())
    assert got == expected_rows([(0, 24), (30, 39)])
    # the read below the gap loses nothing, so it needs no leave
    with read_topic("hand", bucket=hand.url, store=hand.settings, ending_offsets=25,
                    columns=["offset", "timestamp"]) as stream:
        table = stream.read_all()
    assert table.column("offset").to_pylist() == list(range(25))
    assert [int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()] == [
        TS0 + o for o in range(25)]
