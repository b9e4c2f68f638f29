"""A bucket read with remote-log metadata at hand (a real S3 server, SeaweedFS): the
segments read are those the metadata lists COPY_SEGMENT_FINISHED at or above the log start
offset, whether the metadata is Kafka's `__remote_log_metadata` partitions or the embedded
RLMM's files; the bucket's other segments are skipped and named."""

from __future__ import annotations

import pytest
from bucket_support import TS0, HandBucket, expected_rows
from spark_support import arrow_rows

from engine.arrow import read_topic
from engine.config import ConfigError
from engine.records import RecordBatchBuilder
from engine.remote.bucket import Bucket, RemoteDataLossError
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.metadata_files import RemoteLogMetadataFiles
from engine.remote.metadata_topic import encode_record_value

S = RemoteLogSegmentState


@pytest.fixture
def hand(s3_server):
    b = HandBucket(s3_server)
    yield b
    b.close()


def tip_of(hand) -> TopicIdPartition:
    return TopicIdPartition(hand.topic_id, hand.topic, 0)


def added(hand, seg, epochs=None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip_of(hand), seg.segment_id), seg.start, seg.end, TS0 + seg.end,
        1, TS0, len(seg.log), epochs or {0: seg.start})


def moved(md, *states):
    return [RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, TS0 + 1, None, s, 1)
            for s in states]


def write_metadata(log_dir, kind: str, events, log_start_offsets=None):
    """`events` as Kafka's topic-based RLMM (`kind` "kafka") or the embedded RLMM
    ("embedded") stores them, under the log dir `log_dir`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    if kind == "kafka":
        directory = log_dir / "__remote_log_metadata-0"
        directory.mkdir()
        b = RecordBatchBuilder(base_offset=0)
        for ev in events:
            b.append(encode_record_value(ev), key=None, timestamp=TS0)
        (directory / f"{0:020d}.log").write_bytes(b.build())
    else:
        with EmbeddedRemoteLogMetadataManager(log_dir / "__remote_log_metadata") as rlmm:
            for ev in events:
                if isinstance(ev, RemoteLogSegmentMetadata):
                    rlmm.add_remote_log_segment_metadata(ev)
                else:
                    rlmm.update_remote_log_segment_metadata(ev)
    if log_start_offsets:
        lines = "".join(f"{t} {p} {o}\n" for (t, p), o in log_start_offsets.items())
        (log_dir / "log-start-offset-checkpoint").write_text(
            f"0\n{len(log_start_offsets)}\n{lines}")


def chain_of(view):
    return [(link.start_offset, link.end, link.segment.remote_log_segment_id.id)
            for link in view.chain]


@pytest.mark.parametrize("kind", ["kafka", "embedded"])
def test_only_finished_segments_above_the_log_start_offset_are_read(hand, tmp_path, kind):
    expired = hand.segment(0, 9, [(0, 0)])             # FINISHED, below the log start offset
    deleting = hand.segment(0, 9, [(0, 0)])            # DELETE_SEGMENT_STARTED
    early = hand.segment(10, 15, [(0, 0)])             # FINISHED, then displaced by `kept`
    kept = hand.segment(10, 19, [(0, 0)])
    copying = hand.segment(20, 29, [(0, 0)])           # COPY_SEGMENT_STARTED only
    stray = hand.segment(30, 39, [(0, 0)])             # never in the metadata
    md = {s.segment_id: added(hand, s) for s in (expired, deleting, early, kept, copying)}
    events = [md[expired.segment_id], *moved(md[expired.segment_id], S.COPY_SEGMENT_FINISHED),
              md[deleting.segment_id], *moved(md[deleting.segment_id], S.COPY_SEGMENT_FINISHED,
                                              S.DELETE_SEGMENT_STARTED),
              md[early.segment_id], *moved(md[early.segment_id], S.COPY_SEGMENT_FINISHED),
              md[kept.segment_id], *moved(md[kept.segment_id], S.COPY_SEGMENT_FINISHED),
              md[copying.segment_id]]
    write_metadata(tmp_path / "logs", kind, events, {("hand", 0): 12})

    with hand.open() as plain:   # the objects alone take every segment
        assert plain.partition(tip_of(hand)).bounds() == (0, 40)
    metadata = RemoteLogMetadataFiles(tmp_path / "logs")
    with Bucket(hand.url, hand.settings, metadata=metadata) as bucket:
        view = bucket.partition(bucket.partitions()[("hand", 0)])
    assert chain_of(view) == [(12, 20, kept.segment_id)]
    assert view.chain[0].segment == md[kept.segment_id].create_with_updates(
        moved(md[kept.segment_id], S.COPY_SEGMENT_FINISHED)[0])
    assert sorted(f.kind for f in view.skipped) == [
        "below-log-start-offset", "displaced-segment", "not-finished", "not-finished",
        "not-in-metadata"]
    assert {f.kind for f in view.skipped if str(stray.segment_id) in f.key} == {
        "not-in-metadata"}
    assert {f.kind for f in view.skipped if str(copying.segment_id) in f.key} == {
        "not-finished"}
    assert view.gaps == [] and view.bounds() == (12, 20)

    with read_topic("hand", bucket=hand.url, store=hand.settings, include_headers=True,
                    remote_log_metadata=str(tmp_path / "logs")) as stream:
        assert arrow_rows(stream.read_all()) == expected_rows([(12, 19)])


@pytest.mark.parametrize("kind", ["kafka", "embedded"])
def test_a_finished_segment_missing_from_the_bucket_is_lost_data(hand, tmp_path, kind):
    first = hand.segment(0, 9, [(0, 0)])
    middle = hand.segment(10, 19, [(0, 0)], put=False)
    last = hand.segment(20, 29, [(0, 0), (1, 25)], objects=("rsm-manifest", "indexes"))
    events = []
    for s, epochs in ((first, None), (middle, None), (last, {0: 20, 1: 25})):
        m = added(hand, s, epochs)
        events += [m, *moved(m, S.COPY_SEGMENT_FINISHED)]
    write_metadata(tmp_path / "logs", kind, events)
    metadata = RemoteLogMetadataFiles(tmp_path / "logs" / "__remote_log_metadata"
                                      if kind == "embedded" else tmp_path / "logs")
    with Bucket(hand.url, hand.settings, metadata=metadata) as bucket:
        view = bucket.partition(tip_of(hand))
    assert chain_of(view) == [(0, 10, first.segment_id)]
    assert sorted((f.kind, f.first_offset) for f in view.skipped) == [
        ("missing-segment", 10), ("missing-segment", 20)]
    with pytest.raises(RemoteDataLossError, match="from 10 on"):
        view.check_range(0, 10)
    with pytest.raises(RemoteDataLossError):
        read_topic("hand", bucket=hand.url, store=hand.settings,
                   remote_log_metadata=[tmp_path / "logs"])
    with read_topic("hand", bucket=hand.url, store=hand.settings, fail_on_data_loss=False,
                    remote_log_metadata=[tmp_path / "logs"]) as stream:
        assert stream.read_all().column("offset").to_pylist() == list(range(10))


def test_the_export_route_carries_the_metadata_to_the_bucket_reads(hand, tmp_path):
    import argparse

    from engine.cli.export import _arguments, _store_and_properties
    from engine.scan.tier import tier_for_export

    a = hand.segment(0, 9, [(0, 0)])
    hand.segment(10, 19, [(0, 0)])                     # not in the metadata
    m = added(hand, a)
    write_metadata(tmp_path / "logs", "kafka", [m, *moved(m, S.COPY_SEGMENT_FINISHED)])
    parser = argparse.ArgumentParser()
    _arguments(parser)
    args = parser.parse_args(["--bucket", hand.url, "--topic", "hand", "--out", "x",
                              "--remote-log-metadata", str(tmp_path / "logs"),
                              *[a for k, v in hand.settings.items()
                                for a in ("--store", f"{k}={v}")]])
    store, props = _store_and_properties(args)
    with tier_for_export(props, None, "hand", args.bucket, store) as tier:
        chain = tier.chain(tier.partitions()[("hand", 0)])
    assert [(link.start_offset, link.end) for link in chain] == [(0, 10)]


def test_metadata_options_need_a_bucket_and_a_metadata_directory(tmp_path, hand):
    from engine.spark.options import parse_options

    with pytest.raises(ConfigError, match="remoteLogMetadataPath"):
        parse_options({"subscribe": "t", "log.dirs": "/x",
                       "remoteLogMetadataPath": str(tmp_path)})
    with pytest.raises(ConfigError, match="remote_log_metadata"):
        read_topic("hand", config={"log.dirs": str(tmp_path)}, remote_log_metadata=tmp_path)
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "empty", tmp_path / "nothing-here"):
        with pytest.raises(ConfigError, match="remote_log_metadata"):
            read_topic("hand", bucket=hand.url, store=hand.settings, remote_log_metadata=path)


def test_the_metadata_tells_which_topic_id_is_live(hand, tmp_path):
    from engine.common import Uuid
    from engine.remote.metadata import RemotePartitionDeleteMetadata
    from engine.remote.metadata import RemotePartitionDeleteState as D

    old_tip = tip_of(hand)
    old = added(hand, hand.segment(0, 9, [(0, 0)]))
    hand.topic_id = Uuid.random()                      # the topic deleted and created again
    new = added(hand, hand.segment(0, 4, [(0, 0)]))
    events = [old, *moved(old, S.COPY_SEGMENT_FINISHED), new, *moved(new, S.COPY_SEGMENT_FINISHED)]
    events += [RemotePartitionDeleteMetadata(old_tip, state, TS0, 0) for state in D]
    with hand.open() as plain, pytest.raises(ConfigError, match="two topic ids"):
        plain.partitions()
    write_metadata(tmp_path / "logs", "kafka", events)
    with Bucket(hand.url, hand.settings,
                metadata=RemoteLogMetadataFiles(tmp_path / "logs")) as bucket:
        tip = bucket.partitions()[("hand", 0)]
        assert tip == tip_of(hand) and bucket.partition(tip).bounds() == (0, 5)
