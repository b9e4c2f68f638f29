"""`python -m engine scrub` as a real subprocess against a real S3 server (SeaweedFS): a
bucket written by the engine's object-store tier is clean; buckets assembled by hand get
one planted problem each, and the scrubber reports exactly that problem, naming the object
key, the partition and the offsets."""

import json
import os
import struct
import subprocess
import sys
import time
import uuid

import pytest
from bucket_support import HandBucket
from spark_support import REPO, TieredCluster


def scrub(*args, timeout=120):
    out = subprocess.run([sys.executable, "-m", "engine", "scrub", *args], check=False, cwd=REPO,
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return out.returncode, out.stdout, out.stderr


def scrub_hand(hand, *extra):
    store = [a for k, v in hand.settings.items() for a in ("--store", f"{k}={v}")]
    rc, out, err = scrub("--bucket", hand.url, *store, "--json", *extra)
    assert rc in (0, 1), err
    report = json.loads(out)
    return rc, report, err


def kinds(report):
    return [(f["kind"], f["first_offset"], f["last_offset"]) for f in report["findings"]]


@pytest.fixture
def hand(s3_server):
    b = HandBucket(s3_server)
    yield b
    b.close()


def test_an_engine_written_bucket_is_clean(tmp_path, s3_server):
    prefix = f"scrub-{uuid.uuid4().hex[:8]}/"
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": prefix, "rsm.config.chunk.size": "8192",
             "rsm.config.compression.enabled": "true"}
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    cluster = TieredCluster(tmp_path, props)
    cluster.produce_and_tier("events", 2, 600)
    bucket = f"s3://{s3_server.buckets[0]}/{prefix}"
    for args in (["--config", str(cluster.config)],  # the tier, through its RLMM
                 ["--bucket", bucket, "--config", str(cluster.config)]):  # objects alone
        rc, out, err = scrub(*args, "--json")
        assert rc == 0, (args, out, err)
        report = json.loads(out)
        assert report["clean"] and report["segments"] > 4 and report["partitions"] == 2
        assert report["bytes_read"] > 0
        assert "scrub:" in err  # progress on stderr
        assert s3_server.secret_key not in out + err


def test_a_clean_hand_built_bucket_exits_0_with_a_summary(hand):
    hand.segment(0, 9, [(0, 0)])
    hand.segment(10, 20, [(0, 0), (1, 14)])
    store = [a for k, v in hand.settings.items() for a in ("--store", f"{k}={v}")]
    rc, out, err = scrub("--bucket", hand.url, *store)
    assert rc == 0, err
    assert "1 partitions, 2 segments" in out and "clean" in out


def test_a_retried_upload(hand):
    a = hand.segment(0, 9, [(0, 0)])
    b = hand.segment(0, 9, [(0, 0)])
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("duplicate-segment", 0, 9)]
    dropped = max(str(a.segment_id), str(b.segment_id))
    assert dropped in report["findings"][0]["key"]
    assert report["findings"][0]["partition"] == "hand-0"


def test_an_overlapping_segment_of_a_later_leader(hand):
    hand.segment(0, 9, [(0, 0)])
    old = hand.segment(10, 19, [(0, 0)], leader="old-")
    hand.segment(10, 24, [(0, 0), (1, 15)])
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("outside-lineage", 10, 19)]
    assert report["findings"][0]["key"] == old.key("rsm-manifest")


def test_a_half_deleted_segment(hand):
    hand.segment(0, 9, [(0, 0)])
    half = hand.segment(10, 19, [(0, 0)], objects=("rsm-manifest",))
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("incomplete-segment", 10, None)]
    assert report["findings"][0]["key"] == half.key("rsm-manifest")


def test_objects_without_a_manifest(hand):
    hand.segment(0, 9, [(0, 0)])
    orphan = hand.segment(10, 19, [(0, 0)], objects=("log", "indexes"))
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("no-manifest", 10, None)]
    assert report["findings"][0]["key"] == orphan.key("log")


def test_a_gap(hand):
    hand.segment(0, 9, [(0, 0)])
    hand.segment(15, 29, [(0, 0)])
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("gap", 10, 14)]
    assert report["findings"][0]["partition"] == "hand-0"


def test_keys_that_do_not_parse_are_named_under_their_topic(hand):
    """Each is an `unparsed-key` finding; with --topic only those under that topic's
    directories (topic "hand-x"'s are not "hand"'s)."""
    hand.segment(0, 9, [(0, 0)])
    mine = f"{hand.prefix}hand-{hand.topic_id}/0/notes.txt"
    other = f"{hand.prefix}hand-x-{hand.topic_id}/0/notes.txt"
    loose = f"{hand.prefix}README"
    for key in (mine, other, loose):
        hand.put_raw(key, b"not a segment")
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and sorted(f["key"] for f in report["findings"]) == sorted(
        [mine, other, loose])
    assert {f["kind"] for f in report["findings"]} == {"unparsed-key"}
    rc, report, _ = scrub_hand(hand, "--topic", "hand")
    assert rc == 1 and [f["key"] for f in report["findings"]] == [mine]


def test_a_truncated_object(hand):
    hand.segment(0, 9, [(0, 0)])
    seg = hand.segment(10, 19, [(0, 0)], put=False)
    hand.put(seg, ("indexes", "rsm-manifest"))
    hand.put_raw(seg.key("log"), seg.log[:-25])
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("size-mismatch", 10, None)]
    f = report["findings"][0]
    assert f["key"] == seg.key("log") and str(len(seg.log)) in f["detail"]


def test_a_lying_manifest(hand):
    hand.segment(0, 9, [(0, 0)])
    seg = hand.segment(10, 19, [(0, 0)], put=False)
    manifest = json.loads(seg.manifest)
    manifest["chunkIndex"]["finalTransformedChunkSize"] += 7
    seg.manifest = json.dumps(manifest).encode()
    hand.put(seg)
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("bad-manifest", 10, None)]
    assert report["findings"][0]["key"] == seg.key("rsm-manifest")
    assert "finalTransformedChunkSize" in report["findings"][0]["detail"]


def test_a_manifest_whose_segment_metadata_lies(hand):
    seg = hand.segment(0, 9, [(0, 0)], put=False)
    manifest = json.loads(seg.manifest)
    manifest["remoteLogSegmentMetadata"] = {"startOffset": 0, "endOffset": 12}
    seg.manifest = json.dumps(manifest).encode()
    hand.put(seg)
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("bad-manifest", 0, 9)]
    assert "endOffset 12" in report["findings"][0]["detail"]


def test_a_batch_whose_crc_fails(hand):
    seg = hand.segment(0, 9, [(0, 0)], put=False)
    log = bytearray(seg.log)
    log[70] ^= 0xFF  # inside the first batch's records
    seg.log = bytes(log)
    hand.put(seg)
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("corrupt-batch", 0, 9)]
    f = report["findings"][0]
    assert f["key"] == seg.key("log") and "CRC" in f["detail"]


def test_an_offset_index_entry_that_does_not_match_the_log(hand):
    seg = hand.segment(0, 9, [(0, 0)], put=False)
    rel, pos = struct.unpack_from(">ii", seg.indexes, 0)
    seg.indexes = struct.pack(">ii", rel, pos + 1) + seg.indexes[8:]
    hand.put(seg)
    rc, report, _ = scrub_hand(hand)
    assert rc == 1 and kinds(report) == [("index-mismatch", rel, rel)]
    assert report["findings"][0]["key"] == seg.key("indexes")


def test_bad_usage_exits_2_with_one_line(hand, tmp_path):
    for args in ([], ["--bucket", "nope"], ["--bucket", hand.url, "--store", "junk"],
                 ["--config", str(tmp_path / "missing.properties")],
                 ["--bucket", hand.url, "--store", "storage.s3.nope=1"],
                 ["--bucket", hand.url, "--threads", "0"],
                 ["--bucket", hand.url, "--max-bytes-per-second", "0"],
                 ["--bucket", hand.url, "--max-bytes-per-second", "1MB"]):
        rc, out, err = scrub(*args)
        assert rc == 2, (args, out, err)
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


def test_the_command_line_rate_limit_paces_the_scrub(hand):
    """`--max-bytes-per-second` reaches the scrub: at a rate of a sixth of what the bucket
    scrub reads, the run cannot end before five seconds (the token bucket starts with one
    second's worth). A lower bound only, so a slow machine cannot fail it."""
    hand.segment(0, 40, [(0, 0)])
    hand.segment(41, 90, [(0, 0), (1, 60)])
    rc, report, _ = scrub_hand(hand)
    assert rc == 0 and report["clean"]
    total = report["bytes_read"]
    rate = total // 6
    started = time.monotonic()
    rc, paced, err = scrub_hand(hand, "--max-bytes-per-second", str(rate), "--threads", "2")
    elapsed = time.monotonic() - started
    assert rc == 0 and paced["bytes_read"] == total, err
    assert elapsed >= (total - rate) / rate, (elapsed, total, rate)


def test_every_read_of_a_bucket_scrub_goes_through_the_rate_limit(hand, monkeypatch):
    """In-process: the shared TokenBucket is asked for every byte read, the resolution's
    manifest, index and tail reads included (no real sleeping)."""
    import engine.remote.scrub as scrub_module
    from engine.remote.objectstore.store import TokenBucket

    segs = [hand.segment(0, 9, [(0, 0)]), hand.segment(10, 20, [(0, 0), (1, 14)])]
    asked = []

    class Recording(TokenBucket):
        def __init__(self, rate):
            super().__init__(rate, sleep=lambda s: None)

        def acquire(self, n):
            asked.append(n)
            return super().acquire(n)

    monkeypatch.setattr(scrub_module, "TokenBucket", Recording)
    with hand.open() as bucket:
        handed = []  # bytes the RSM hands out, to the resolution and to the checks
        for name in ("read_range", "read_range_into", "read_range_once", "map_range",
                     "fetch_index_bytes"):
            real = getattr(bucket.rsm, name)

            def counted(md, *a, _real=real, _into=name == "read_range_into"):
                out = _real(md, *a)
                handed.append(out if _into else len(out))
                return out
            monkeypatch.setattr(bucket.rsm, name, counted)
        report = scrub_module.scrub_bucket(bucket, max_bytes_per_second=1000)
    assert report.clean, report.summary()
    manifests = sum(len(s.manifest) for s in segs)  # each GET once by the manifest check
    once = sum(len(s.log) + len(s.indexes) for s in segs)
    assert sum(handed) > once  # the checks read everything, the resolution indexes and tails
    assert sum(asked) == report.bytes_read == sum(handed) + manifests
