"""A tiered topic from a bucket alone (engine.remote.bucket), against a real S3 server
(SeaweedFS): buckets assembled by hand to the plugin's layout, one planted problem each,
resolved as Kafka's RLMM would by the leader-epoch lineage the segments record."""

import logging

import pytest
from bucket_support import HandBucket

from engine.config import ConfigError
from engine.remote.bucket import RemoteDataLossError, bucket_configs, parse_bucket_url


@pytest.fixture
def hand(s3_server):
    b = HandBucket(s3_server)
    yield b
    b.close()


def view_of(hand):
    bucket = hand.open()
    try:
        tips = bucket.partitions()
        return bucket.partition(tips[(hand.topic, 0)])
    finally:
        bucket.close()


def chain_of(view):
    return [(link.start_offset, link.end, str(link.segment.remote_log_segment_id.id))
            for link in view.chain]


def test_bucket_urls_and_settings():
    assert parse_bucket_url("s3://b/tiered") == ("s3", "b", "tiered/")
    assert parse_bucket_url("s3://b/a/b/") == ("s3", "b", "a/b/")
    assert parse_bucket_url("s3://b") == ("s3", "b", "")
    for bad in ("b/prefix", "http://b/x", "s3:///x", "s3://b/x?y=1"):
        with pytest.raises(ConfigError, match="bucket"):
            parse_bucket_url(bad)
    broker = {"rsm.config.storage.s3.bucket.name": "other", "rsm.config.key.prefix": "old/",
              "rsm.config.storage.s3.region": "eu", "log.dirs": "/x"}
    got = bucket_configs("s3://b/p", {"storage.s3.endpoint.url": "http://h:1"}, broker)
    assert got["storage.s3.bucket.name"] == "b" and got["key.prefix"] == "p/"
    assert got["storage.s3.region"] == "eu" and got["storage.s3.endpoint.url"] == "http://h:1"
    assert "log.dirs" not in got


def test_a_clean_bucket_is_one_chain(hand):
    a = hand.segment(0, 9, [(0, 0)])
    b = hand.segment(10, 20, [(0, 0), (1, 14)])
    view = view_of(hand)
    assert chain_of(view) == [(0, 10, str(a.segment_id)), (10, 21, str(b.segment_id))]
    assert view.skipped == [] and view.gaps == []
    assert view.chain[1].segment.segment_leader_epochs == {0: 10, 1: 14}
    assert view.chain[1].segment.max_timestamp_ms == 1_700_000_000_000 + 20
    view.check_range(0, 21)


def test_a_retried_upload_is_read_once(hand):
    first = hand.segment(0, 9, [(0, 0)])
    retry = hand.segment(0, 9, [(0, 0)])
    view = view_of(hand)
    kept = min(str(first.segment_id), str(retry.segment_id))
    other = max(str(first.segment_id), str(retry.segment_id))
    assert chain_of(view) == [(0, 10, kept)]
    assert [(f.kind, f.first_offset, f.last_offset) for f in view.skipped] == [
        ("duplicate-segment", 0, 9)]
    assert other in view.skipped[0].key and view.skipped[0].partition == "hand-0"


def test_an_overlapping_segment_of_a_later_leader_wins(hand):
    hand.segment(0, 9, [(0, 0)])
    old = hand.segment(10, 19, [(0, 0)], leader="old-")
    new = hand.segment(10, 24, [(0, 0), (1, 15)])
    view = view_of(hand)
    assert [c[2] for c in chain_of(view)][1:] == [str(new.segment_id)]
    assert [(f.kind, f.first_offset, f.last_offset) for f in view.skipped] == [
        ("outside-lineage", 10, 19)]
    assert str(old.segment_id) in view.skipped[0].key
    assert "14" in view.skipped[0].detail  # where the latest leader's epoch 0 ends


def test_a_later_leader_overlapping_the_tail_owns_the_shared_offsets(hand):
    hand.segment(0, 9, [(0, 0)])
    # the new leader's segment starts inside the old one: both agree on offsets 5-9
    b = hand.segment(5, 15, [(0, 0), (1, 12)])
    view = view_of(hand)
    assert [(s, e) for s, e, _ in chain_of(view)] == [(0, 5), (5, 16)]
    assert chain_of(view)[1][2] == str(b.segment_id) and view.gaps == []


def test_a_half_deleted_segment_is_skipped_and_its_offsets_are_a_gap(hand, caplog):
    hand.segment(0, 9, [(0, 0)])
    half = hand.segment(10, 19, [(0, 0)], objects=("indexes", "rsm-manifest"))
    hand.segment(20, 29, [(0, 0)])
    view = view_of(hand)
    assert [(f.kind, f.first_offset) for f in view.skipped] == [("incomplete-segment", 10)]
    assert view.skipped[0].key == half.key("rsm-manifest")
    assert view.gaps == [(10, 19)]
    with pytest.raises(RemoteDataLossError, match=r"hand-0: offsets 10-19") as info:
        view.check_range(0, 30)
    assert info.value.missing == ((10, 19),) and info.value.partition == "hand-0"
    with caplog.at_level(logging.WARNING, logger="engine.remote.bucket"):
        view.check_range(0, 30, fail_on_data_loss=False)
    assert "10-19" in caplog.text
    view.check_range(20, 30)  # a read past the gap loses nothing


def test_a_segment_without_its_manifest_does_not_count(hand):
    hand.segment(0, 9, [(0, 0)])
    hand.segment(10, 19, [(0, 0)], objects=("log", "indexes"))  # an upload in progress
    view = view_of(hand)
    assert chain_of(view)[0][:2] == (0, 10) and len(view.chain) == 1
    assert view.skipped == [] and view.gaps == []


def test_a_gap_between_segments_is_named(hand):
    hand.segment(0, 9, [(0, 0)])
    hand.segment(15, 29, [(0, 0)])
    view = view_of(hand)
    assert view.gaps == [(10, 14)]
    assert view.missing(12, 100) == [(12, 14)]
    with pytest.raises(RemoteDataLossError, match="10-14"):
        view.check_range(0, 30)


def test_keys_that_do_not_parse_are_counted_not_read(hand):
    hand.segment(0, 9, [(0, 0)])
    hand.put_raw(f"{hand.prefix}notes.txt", b"x")
    hand.put_raw(f"{hand.prefix}hand-short/0/1.log", b"x")
    bucket = hand.open()
    try:
        listing = bucket.listing()
        assert listing.unparsed_count == 2
        assert sorted(listing.unparsed) == sorted([f"{hand.prefix}notes.txt",
                                                   f"{hand.prefix}hand-short/0/1.log"])
        assert list(bucket.partitions()) == [("hand", 0)]
    finally:
        bucket.close()


def test_a_damaged_last_segment_is_lost_data_not_a_shorter_partition(hand):
    hand.segment(0, 9, [(0, 0)])
    seg = hand.segment(10, 19, [(0, 0)], put=False)
    hand.put(seg, ("indexes", "rsm-manifest"))
    hand.put_raw(seg.key("log"), seg.log[:-25])  # truncated
    view = view_of(hand)
    assert [(f.kind, f.first_offset) for f in view.skipped] == [("unreadable-segment", 10)]
    assert view.bounds() == (0, 10) and view.gaps == []
    with pytest.raises(RemoteDataLossError, match=r"hand-0: offsets from 10 on") as info:
        view.check_range(0, 10)  # a read to the end of what is readable
    assert info.value.missing == ((10, None),)
    assert seg.key("rsm-manifest") in str(info.value)
    view.check_range(0, 5)  # a read that stops before loses nothing
    view.check_range(0, 10, fail_on_data_loss=False)


def test_a_damaged_first_segment_is_lost_data_not_a_later_start(hand):
    """Below the first readable segment, a damaged one is lost data for a read from the
    start, not a partition that begins later."""
    seg = hand.segment(0, 9, [(0, 0)], put=False)
    hand.put(seg, ("log", "indexes"))
    hand.put_raw(seg.key("rsm-manifest"), b"{not json")
    hand.segment(10, 19, [(0, 0)])
    hand.segment(20, 29, [(0, 0)])
    view = view_of(hand)
    assert [(f.kind, f.first_offset) for f in view.skipped] == [("unreadable-segment", 0)]
    assert view.bounds() == (10, 30) and view.gaps == []
    with pytest.raises(RemoteDataLossError, match=r"hand-0: offsets 0-9 ") as info:
        view.check_range(10, 30)  # a read from the earliest readable offset
    assert info.value.missing == ((0, 9),)
    assert seg.key("rsm-manifest") in str(info.value)
    view.check_range(11, 30)  # a read from further on loses nothing
    view.check_range(10, 30, fail_on_data_loss=False)


def test_a_half_deleted_first_segment_is_retention_not_lost_data(hand):
    hand.segment(0, 9, [(0, 0)], objects=("rsm-manifest",))  # its .log deleted first
    hand.segment(10, 19, [(0, 0)])
    view = view_of(hand)
    assert [(f.kind, f.first_offset) for f in view.skipped] == [("incomplete-segment", 0)]
    view.check_range(10, 20)


def test_a_partition_with_only_a_half_deleted_segment_is_lost_data(hand):
    hand.segment(0, 9, [(0, 0)], objects=("rsm-manifest",))
    view = view_of(hand)
    assert view.chain == [] and view.bounds() is None
    with pytest.raises(RemoteDataLossError, match=r"from 0 on"):
        view.check_range(0, 0)


def synthetic_keys(prefix, topic_id, partitions, per_partition):
    from engine.common import Uuid
    from engine.remote.objectstore.store import ObjectInfo

    for p in range(partitions):
        for i in range(per_partition):
            sid = Uuid.random()
            for suffix in ("indexes", "log", "rsm-manifest"):
                yield ObjectInfo(f"{prefix}t-x-{topic_id}/{p}/{i * 100:020d}-{sid}.{suffix}",
                                 100 + i)


def test_the_listing_parses_keys_as_the_layout_says():
    from engine.common import Uuid
    from engine.remote.bucket import group_listing
    from engine.remote.objectstore.keys import parse_object_key
    from engine.remote.objectstore.store import ObjectInfo

    tid, sid = Uuid.random(), Uuid.random()
    keys = [f"p/a-b-{tid}/0/{5:020d}-{sid}.log", f"p/a-b-{tid}/0/{5:020d}-{sid}.rsm-manifest",
            f"p/a-b-{tid}/12/{7:020d}-{sid}.indexes", f"p/a-b-{tid}/01/{5:020d}-{sid}.log",
            f"p/a-b-{tid}/0/{5:019d}-{sid}.log", f"p/a-b-{tid}/0/{5:020d}-{sid}.txt",
            f"q/a-b-{tid}/0/{5:020d}-{sid}.log", f"p/a-{tid}x/0/{5:020d}-{sid}.log",
            f"p/a-b-{tid}/4294967296/{5:020d}-{sid}.log"]
    listing = group_listing((ObjectInfo(k, 1) for k in keys), "p/")
    parsed = [k for k in keys if parse_object_key(k, "p/") is not None]
    assert listing.unparsed_count == len(keys) - len(parsed)
    got = {(tip.topic, tip.partition, s.start_offset, str(s.segment_id))
           for tip, segs in listing.partitions.items() for s in segs}
    want = {(k.topic, k.partition, k.start_offset, str(k.segment_id))
            for k in (parse_object_key(key, "p/") for key in parsed)}
    assert got == want and ("a-b", 0, 5, str(sid)) in got


def test_a_listing_of_many_segments_keeps_segments_not_pages():
    import tracemalloc

    from engine.common import Uuid
    from engine.remote.bucket import group_listing

    n = 100_000  # the size the issue names
    tracemalloc.start()
    try:
        listing = group_listing(synthetic_keys("pre/", Uuid.random(), 2, n // 2), "pre/")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    segs = [s for v in listing.partitions.values() for s in v]
    assert len(segs) == n and all(s.manifest_size is not None for s in segs)
    # three keys of ~95 bytes a segment go by; what stays is a small record per segment
    assert peak / n < 700, peak / n
