"""The `kafka-tiered` source in a real local Spark session (local[2]) over topics the
engine produced and the RemoteLogManager tiered. Rows are compared with what
`python -m engine fetch` returns for the same offsets."""

import shutil
from pathlib import Path

import pytest
from spark_support import StreamSink, TieredCluster, arrow_rows, fetch_row

TOPIC = "events"
PARTITIONS = 2
RECORDS = 2500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = TieredCluster(tmp_path_factory.mktemp("spark-tier"))
    c.produce_and_tier(TOPIC, PARTITIONS, RECORDS)
    c.produce_and_tier("plain", 1, 700, codec="none", segment_bytes=32 << 10, seed=7)
    return c


@pytest.fixture(scope="module")
def fetched(cluster):
    """(topic, partition, read_committed) -> fetch records, every offset from 0."""
    keys = [(topic, p, committed) for topic, parts in ((TOPIC, PARTITIONS), ("plain", 1))
            for p in range(parts) for committed in (False, True)]
    # one at a time: fetch opens the broker's log dirs, which takes their lock
    return {k: cluster.fetch(k[0], k[1], 0, read_committed=k[2]) for k in keys}


def read(spark, cluster, **options):
    reader = spark.read.format("kafka-tiered").option("config", str(cluster.config))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def expected(fetched, topic, partitions, lo=0, hi=None, committed=False, headers=True):
    rows = []
    for p in partitions:
        rows += [fetch_row(topic, p, r, headers) for r in fetched[(topic, p, committed)]
                 if r["offset"] >= lo and (hi is None or r["offset"] < hi)]
    return sorted(rows, key=lambda r: (r[3], r[4]))


def tier_end(cluster, topic, partition):
    from engine.scan.planning import tier_bounds
    from engine.scan.tier import Tier

    with Tier(cluster.props) as tier:
        return tier_bounds(tier.chain(tier.partitions()[(topic, partition)]))


def test_every_row_equals_fetch_with_the_kafka_schema(spark, cluster, fetched):
    df = read(spark, cluster, subscribe=f"{TOPIC},plain", includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    got = arrow_rows(df.toArrow())
    want = expected(fetched, TOPIC, range(PARTITIONS)) + expected(fetched, "plain", [0])
    assert len(got) == len(want) == 2 * RECORDS + 700
    assert got == sorted(want, key=lambda r: (r[3], r[4])) or got == want
    assert sorted(got, key=lambda r: (r[2], r[3], r[4])) == sorted(
        want, key=lambda r: (r[2], r[3], r[4]))
    assert any(r[7] for r in got) and any(r[0] is None for r in got)
    # without includeHeaders the column is absent, as in Spark's Kafka source
    plain = read(spark, cluster, subscribe="plain")
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType"]


def test_explicit_register_and_small_tasks_give_the_same_rows(spark, cluster, fetched):
    import engine.spark
    from engine.spark.options import parse_options
    from engine.spark.source import plan_scan

    engine.spark.register(spark)
    options = dict(assign='{"events":[1]}', maxBytesPerPartition="20000",
                   startingOffsets='{"events":{"1":400}}', endingOffsets='{"events":{"1":1000}}')
    from engine.scan.tier import Tier

    tasks = plan_scan(parse_options({"config": str(cluster.config), **options}))
    assert len(tasks) > 3
    assert any(r.start_position > 0 for t in tasks for r in t.ranges)  # cut at index entries
    with Tier(cluster.props) as tier:
        for t in tasks:
            if sum(r.size for r in t.ranges) > 20000:  # only when no index entry allows a cut
                (r,) = t.ranges
                positions = tier.offset_entries(r.segment)["position"]
                assert not ((positions > r.start_position) & (positions < r.end_position)).any()
    df = read(spark, cluster, includeHeaders="true", **options)
    assert arrow_rows(df.toArrow()) == expected(fetched, TOPIC, [1], 400, 1000)
    whole = {"config": str(cluster.config), "assign": '{"events":[1]}'}
    assert len(plan_scan(parse_options(whole))) == 1  # ~1 MiB: one task by bytes
    assert len(plan_scan(parse_options({**whole, "minPartitions": "6"}))) >= 6


def test_offset_bounds(spark, cluster, fetched):
    starting = '{"events":{"0":777,"1":-2}}'
    ending = '{"events":{"0":1999,"1":-1}}'
    df = read(spark, cluster, subscribe=TOPIC, startingOffsets=starting, endingOffsets=ending,
              includeHeaders="true")
    want = expected(fetched, TOPIC, [0], 777, 1999) + expected(fetched, TOPIC, [1])
    assert arrow_rows(df.toArrow()) == sorted(want, key=lambda r: (r[3], r[4]))


def test_timestamp_bounds(spark, cluster, fetched):
    records = fetched[(TOPIC, 0, False)]
    t_start = records[600]["timestamp"] + 1
    t_end = records[1800]["timestamp"]

    def first_at_or_after(ts):
        return min(r["offset"] for r in records if r["timestamp"] >= ts)

    lo, hi = first_at_or_after(t_start), first_at_or_after(t_end)
    df = read(spark, cluster, assign='{"events":[0]}', startingTimestamp=str(t_start),
              endingTimestamp=str(t_end), includeHeaders="true")
    assert arrow_rows(df.toArrow()) == expected(fetched, TOPIC, [0], lo, hi)
    by_partition = read(spark, cluster, assign='{"events":[0]}', includeHeaders="true",
                        startingOffsetsByTimestamp=f'{{"events":{{"0":{t_start}}}}}')
    assert arrow_rows(by_partition.toArrow()) == expected(fetched, TOPIC, [0], lo)
    late = str(records[-1]["timestamp"] + 10_000)
    with pytest.raises(Exception, match="no tiered record has a timestamp"):
        read(spark, cluster, assign='{"events":[0]}', startingTimestamp=late).count()
    assert read(spark, cluster, assign='{"events":[0]}', startingTimestamp=late,
                startingOffsetsByTimestampStrategy="latest").count() == 0


def test_read_committed_leaves_out_aborted_transactions(spark, cluster, fetched):
    committed = read(spark, cluster, subscribe=TOPIC, readCommitted="true",
                     includeHeaders="true")
    got = arrow_rows(committed.toArrow())
    want = expected(fetched, TOPIC, range(PARTITIONS), committed=True)
    assert got == want
    everything = expected(fetched, TOPIC, range(PARTITIONS))
    assert len(want) < len(everything)  # produce-demo aborts transactions: some rows go
    offsets = {(r[3], r[4]) for r in got}
    aborted = [r for r in everything if (r[3], r[4]) not in offsets]
    assert aborted and len(aborted) == len(everything) - len(want)


def test_read_committed_stops_where_the_tier_does_not_hold_a_transactions_outcome(
        spark, cluster):
    cluster.tier_with_marker_untiered("open-txn")
    assert tier_end(cluster, "open-txn", 0) == (0, 8)  # the marker at 8 is not tiered
    everything = read(spark, cluster, subscribe="open-txn").toArrow()
    assert everything.column("offset").to_pylist() == list(range(8))
    committed = read(spark, cluster, subscribe="open-txn", readCommitted="true").toArrow()
    assert committed.column("value").to_pylist() == [b"committed-%d" % i for i in range(5)]


QUERIES = [
    "offset >= 300 AND offset < 1234 AND partition = 1",
    "topic = 'events' AND offset IN (5, 900, 1500) AND partition IN (0)",
    "timestamp >= TIMESTAMP '2023-11-14 22:13:22' AND offset <= 2100",
]


@pytest.mark.parametrize("where", QUERIES)
def test_filter_pushdown_on_and_off_give_the_same_rows(spark, cluster, fetched, where):
    key = "spark.sql.python.filterPushdown.enabled"
    results = {}
    for flag in ("false", "true"):
        spark.conf.set(key, flag)
        try:
            df = read(spark, cluster, subscribe=f"{TOPIC},plain", includeHeaders="true",
                      maxBytesPerPartition="100000").where(where)
            results[flag] = arrow_rows(df.toArrow())
        finally:
            spark.conf.unset(key)
    assert results["true"] == results["false"] and results["true"]
    if where == QUERIES[0]:
        assert results["true"] == expected(fetched, TOPIC, [1], 300, 1234)


def test_the_pushdown_planner_is_where_the_source_looks_for_it():
    """The source tells the pushdown planner from the plain one by the planner's file
    (engine.spark.source._called_for_pushdown): it must exist in the installed pyspark and
    be the worker that asks the data source for a reader and pushes filters to it."""
    import pyspark.sql.worker as workers

    from engine.spark.source import PUSHDOWN_PLANNER_FILE

    planner = Path(workers.__file__).with_name(PUSHDOWN_PLANNER_FILE).read_text()
    assert "data_source.reader(" in planner and ".pushFilters(" in planner
    plain = Path(workers.__file__).with_name("plan_data_source_read.py").read_text()
    assert "DATA_SOURCE_PUSHDOWN_DISABLED" in plain


def test_pushed_filters_prune_segments_and_tasks(cluster):
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan

    from engine.spark.options import parse_options
    from engine.spark.source import KafkaTieredPushdownReader, KafkaTieredReader

    opts = parse_options({"config": str(cluster.config), "subscribe": f"{TOPIC},plain",
                          "maxBytesPerPartition": "30000"})

    def planned(reader):
        return sum(r.size for task in reader.partitions() for r in task.ranges)

    full = planned(KafkaTieredReader(opts))
    exact = [GreaterThanOrEqual(("offset",), 300), LessThan(("offset",), 1234),
             EqualTo(("partition",), 1), EqualTo(("topic",), TOPIC)]
    kept = [IsNotNull(("offset",)), In(("offset",), (5, 900))]
    reader = KafkaTieredPushdownReader(opts)
    assert list(reader.pushFilters(exact + kept)) == kept  # the same objects, Spark re-checks
    assert 0 < planned(reader) < full / 4
    ranges = [r for task in reader.partitions() for r in task.ranges]
    assert {(r.topic, r.partition) for r in ranges} == {(TOPIC, 1)}
    assert min(r.min_offset for r in ranges) == 300 and max(r.max_offset for r in ranges) == 901
    late = KafkaTieredPushdownReader(opts)
    last_ts = max(r["timestamp"] for r in cluster.fetch(TOPIC, 0, 0)) - 1000
    ts_filter = GreaterThanOrEqual(("timestamp",), _dt(last_ts))
    assert list(late.pushFilters([ts_filter])) == [ts_filter]  # pruning only
    assert 0 < planned(late) < full / 4


def _dt(ms):
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def test_bad_input_is_named(spark, cluster, tmp_path):
    with pytest.raises(Exception, match=r"unknown topic 'nope'.*holds \[.*'events'.*'plain'"):
        read(spark, cluster, subscribe="nope").count()
    with pytest.raises(Exception, match=r"unknown partition events-9"):
        read(spark, cluster, assign='{"events":[9]}').count()
    lo, hi = tier_end(cluster, TOPIC, 0)
    with pytest.raises(Exception, match=rf"events-0: offsets \[0, {hi + 5}\) are outside the "
                                        rf"remote tier: the remote tier holds offsets "
                                        rf"\[{lo}, {hi}\)"):
        read(spark, cluster, subscribe=TOPIC,
             endingOffsets=f'{{"events":{{"0":{hi + 5}}}}}').count()
    with pytest.raises(Exception, match="configuration is missing"):
        spark.read.format("kafka-tiered").option("subscribe", TOPIC).load()
    with pytest.raises(Exception, match="config.*file not found"):
        spark.read.format("kafka-tiered").option("subscribe", TOPIC).option(
            "config", str(tmp_path / "missing.properties")).load()
    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        spark.read.format("kafka-tiered").option("config", str(cluster.config)).load()


def test_corrupt_remote_bytes_are_named(spark, cluster, tmp_path):
    broken = TieredCluster(tmp_path / "broken")
    shutil.rmtree(broken.base)
    shutil.copytree(cluster.base, broken.base)
    broken.config.write_text(cluster.config.read_text().replace(str(cluster.base),
                                                                str(broken.base)))
    logs = sorted((broken.tier_dir).rglob("*.log"))
    victim = next(p for p in logs if "plain-0" in str(p))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(Exception) as info:
        read(spark, broken, subscribe="plain").count()
    message = str(info.value)
    assert "plain-0 remote segment" in message, message
    assert ("CRC" in message or "checksum" in message or "corrupt" in message.lower()), message


def test_stream_offsets_follow_max_offsets_per_trigger(cluster):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from engine.spark.options import parse_options
    from engine.spark.source import KafkaTieredStreamReader

    reader = KafkaTieredStreamReader(parse_options(
        {"config": str(cluster.config), "subscribe": TOPIC, "startingOffsets": "earliest",
         "maxOffsetsPerTrigger": "1500"}, streaming=True))
    ends = {str(p): tier_end(cluster, TOPIC, p)[1] for p in range(PARTITIONS)}
    offsets = reader.initialOffset()
    assert offsets == {TOPIC: {str(p): 0 for p in range(PARTITIONS)}}
    assert reader.latestOffset(offsets, ReadAllAvailable()) == {TOPIC: ends}
    steps = 0
    while offsets[TOPIC] != ends:
        nxt = reader.latestOffset(offsets, reader.getDefaultReadLimit())
        moved = sum(nxt[TOPIC][p] - offsets[TOPIC][p] for p in ends)
        assert 0 < moved <= 1500
        ranges = [r for task in reader.partitions(offsets, nxt) for r in task.ranges]
        assert {(r.partition, r.min_offset) for r in ranges} >= {
            (int(p), offsets[TOPIC][p]) for p in ends if nxt[TOPIC][p] > offsets[TOPIC][p]}
        offsets, steps = nxt, steps + 1
    fewest = -(-sum(ends.values()) // 1500)
    assert fewest <= steps <= fewest + 2  # shares are rounded down


def test_streaming_reads_segments_tiered_while_it_runs(spark, cluster, tmp_path):
    topic = "stream"
    cluster.produce_and_tier(topic, 2, 400, seed=11)
    sink = StreamSink(tmp_path)

    def start(trigger):
        return sink.start(spark.readStream.format("kafka-tiered")
                          .option("config", str(cluster.config)).option("subscribe", topic)
                          .option("startingOffsets", "earliest")
                          .option("includeHeaders", "true").load(), trigger)

    query = start({"processingTime": "500 milliseconds"})
    try:
        sink.wait_for(800)
        cluster.produce_and_tier(topic, 2, 300, seed=12)  # tiered while the query runs
        sink.wait_for(1400)
    finally:
        query.stop()
    cluster.produce_and_tier(topic, 2, 200, seed=13)   # tiered while it is stopped
    query = start({"availableNow": True})
    query.awaitTermination(120)
    query.stop()

    got = sink.offsets()
    assert len(got) == len(set(got)) == 1800  # restart from the checkpoint: no loss, no dup
    table = sink.table()
    fetched_rows = []
    for p in range(2):
        fetched_rows += [fetch_row(topic, p, r) for r in cluster.fetch(topic, p, 0)]
    assert arrow_rows(table) == sorted(fetched_rows, key=lambda r: (r[3], r[4]))
