"""`python -m engine scrub --config FILE` as a real subprocess: the broker's tier through its
embedded RLMM, on the filesystem tier and on the object-store tier (a real S3 server,
SeaweedFS). Each test plants one problem in a tier built segment by segment
(tests/tier_support.py) and the scrubber reports exactly that problem, naming the object
key (or file), the partition and the offsets."""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from spark_support import REPO
from tier_support import LOG, OTHER, HandTier
from tier_support import S as State

from engine.remote.metadata import RemoteLogSegmentState


def scrub(*args, timeout=120):
    out = subprocess.run([sys.executable, "-m", "engine", "scrub", *args], check=False, cwd=REPO,
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return out.returncode, out.stdout, out.stderr


def scrub_json(tier, *extra):
    tier.rlmm.close()  # the scrub reads the RLMM's files as a broker left them
    rc, out, err = scrub("--config", str(tier.config), "--json", *extra)
    assert rc in (0, 1), err
    return rc, json.loads(out), err


def kinds(report):
    return [(f["kind"], f["first_offset"], f["last_offset"]) for f in report["findings"]]


@pytest.fixture(params=["fs", "s3"])
def tier(request, tmp_path):
    s3 = request.getfixturevalue("s3_server") if request.param == "s3" else None
    t = HandTier(tmp_path, request.param, s3)
    yield t
    t.close()


def test_a_clean_tier_exits_0_with_progress_and_a_summary(tier):
    tier.segment(0, 9, [(0, 0)])
    tier.segment(10, 20, [(0, 0), (1, 14)])
    tier.rlmm.close()
    rc, out, err = scrub("--config", str(tier.config))
    assert rc == 0, (out, err)
    assert "1 partitions, 2 segments" in out and "clean" in out
    assert "scrub: 2/2 segments" in err
    assert "2 finished segments in 1 partitions to check" in err


def test_segments_being_copied_or_deleted_are_neither_missing_nor_orphans(tier):
    tier.segment(0, 9, [(0, 0)], state=State.DELETE_SEGMENT_STARTED)
    tier.segment(10, 19, [(0, 0)])
    copying = tier.segment(20, 29, [(0, 0)], state=State.COPY_SEGMENT_STARTED)
    tier.remove(copying, LOG[tier.kind])  # a copy under way: the .log not there yet
    deleting = tier.segment(30, 39, [(0, 0)])
    tier.move(deleting, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
    tier.remove(deleting, OTHER[tier.kind])  # a delete under way
    rc, report, _ = scrub_json(tier)
    assert rc == 0 and report["clean"], report
    assert report["segments"] == 4


def test_a_missing_log(tier):
    tier.segment(0, 9, [(0, 0)])
    seg = tier.segment(10, 19, [(0, 0)])
    key = tier.remove(seg, LOG[tier.kind])
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and kinds(report) == [("missing-object", 10, 19)]
    f = report["findings"][0]
    assert f["key"] == key and f["partition"] == "hand-0"
    assert str(seg.remote_log_segment_id.id) in key


def test_a_missing_manifest_or_index_file(tier):
    seg = tier.segment(0, 9, [(0, 0)])
    tier.segment(10, 19, [(0, 0)])
    key = tier.remove(seg, OTHER[tier.kind])
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and kinds(report) == [("missing-object", 0, 9)]
    assert report["findings"][0]["key"] == key


def test_orphans_are_reported_and_deleted_only_without_dry_run(tier):
    gone = tier.segment(0, 9, [(0, 0)], state=State.DELETE_SEGMENT_FINISHED)
    kept = tier.segment(10, 19, [(0, 0)])
    never = tier.segment(20, 29, [(0, 0)], record=False)  # a copy never recorded
    orphans = sorted(tier.keys(gone) + tier.keys(never))
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and {f["kind"] for f in report["findings"]} == {"orphan"}
    assert sorted(f["key"] for f in report["findings"]) == orphans
    assert {f["first_offset"] for f in report["findings"]} == {0, 20}
    assert report["dry_run"] is True and report["orphans_deleted"] == []

    rc, report, _ = scrub_json(tier, "--delete-orphans")  # a dry run: nothing deleted
    assert rc == 1 and report["orphans_deleted"] == []
    assert all(tier.exists(k) for k in orphans)

    rc, report, _ = scrub_json(tier, "--delete-orphans", "--no-dry-run")
    assert rc == 1 and sorted(report["orphans_deleted"]) == orphans
    assert not any(tier.exists(k) for k in orphans)
    assert all(tier.exists(k) for k in tier.keys(kept))
    rc, report, _ = scrub_json(tier)
    assert rc == 0 and report["clean"], report


def test_a_size_mismatch(tier):
    tier.segment(0, 9, [(0, 0)])
    seg = tier.segment(10, 19, [(0, 0)])
    key = tier.truncate(seg, LOG[tier.kind], 25)
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and kinds(report) == [("size-mismatch", 10, 19)]
    f = report["findings"][0]
    assert f["key"] == key and str(seg.segment_size_in_bytes) in f["detail"]


def test_a_segment_outside_the_leader_epoch_lineage(tier):
    tier.segment(0, 9, [(0, 0)])
    old = tier.segment(10, 19, [(0, 0)], leader="old-")
    tier.segment(10, 24, [(0, 0), (1, 15)])
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and kinds(report) == [("outside-lineage", 10, 19)]
    f = report["findings"][0]
    assert str(old.remote_log_segment_id.id) in f["key"] and "epoch 0" in f["detail"]


def test_a_gap(tier):
    tier.segment(0, 9, [(0, 0)])
    tier.segment(15, 29, [(0, 0)])
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and kinds(report) == [("gap", 10, 14)]
    assert report["findings"][0]["partition"] == "hand-0"


def test_an_overlap(tier):
    first = tier.segment(0, 9, [(0, 0)])
    second = tier.segment(5, 19, [(0, 0)])
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and kinds(report) == [("overlap", 5, 9)]
    f = report["findings"][0]
    assert str(first.remote_log_segment_id.id) in f["key"]
    assert str(second.remote_log_segment_id.id) in f["detail"]


def test_unreadable_rlmm_metadata(tier):
    tier.segment(0, 9, [(0, 0)])
    tier.segment(10, 19, [(0, 0)])
    tier.rlmm.close()
    log = tier.metadata_log()
    data = bytearray(log.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside an early event, valid frames after it
    log.write_bytes(bytes(data))
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and kinds(report) == [("unreadable-rlmm", None, None)]
    f = report["findings"][0]
    assert f["key"] == str(log) and f["partition"] == "hand-0"
    assert "neither checked nor judged orphans" in f["detail"]


def test_bad_usage_exits_2_with_one_line(tier, tmp_path):
    tier.rlmm.close()
    empty = tmp_path / "empty.properties"
    empty.write_text(tier.config.read_text().replace(str(tier.log_dir),
                                                     str(tmp_path / "elsewhere")))
    for args in (["--config", str(empty)],
                 ["--bucket", "s3://b/p", "--delete-orphans"],
                 ["--config", str(tier.config), "--store", "a=b"]):
        rc, out, err = scrub(*args)
        assert rc == 2, (args, out, err)
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


def test_a_damaged_log_byte(tier):
    seg = tier.segment(0, 9, [(0, 0)])
    key = tier.key(seg, LOG[tier.kind])
    if tier.kind == "fs":
        data = bytearray(Path(key).read_bytes())
        data[70] ^= 0xFF  # inside the first batch's records
        Path(key).write_bytes(bytes(data))
    else:
        data = bytearray(tier.rsm.store.get(key))
        data[70] ^= 0xFF
        tier.rsm.store.put_bytes(key, bytes(data))
    rc, report, _ = scrub_json(tier)
    # the filesystem tier checks the file's CRC32C record before any batch
    kind = "unreadable-object" if tier.kind == "fs" else "corrupt-batch"
    assert rc == 1 and kinds(report) == [(kind, 0, 9)]
    assert report["findings"][0]["key"] == key and "CRC" in report["findings"][0]["detail"]


def test_every_read_goes_through_the_rate_limit(tier, monkeypatch):
    """In-process: the shared TokenBucket is asked for every byte the tier hands out
    (no real sleeping), and that is every byte of the segments' files."""
    import engine.remote.scrub_tier as scrub_tier_module
    from engine.remote.factory import open_remote_log_metadata_reader
    from engine.remote.objectstore.store import TokenBucket

    segs = [tier.segment(0, 9, [(0, 0)]), tier.segment(10, 29, [(0, 0), (1, 20)])]
    tier.rlmm.close()
    asked = []

    class Recording(TokenBucket):
        def __init__(self, rate):
            super().__init__(rate, sleep=lambda s: None)

        def acquire(self, n):
            asked.append(n)
            return super().acquire(n)

    monkeypatch.setattr(scrub_tier_module, "TokenBucket", Recording)
    handed = []
    for name in ("read_range", "map_range", "fetch_index_bytes"):
        real = getattr(tier.rsm, name)

        def counted(*a, _real=real):
            data = _real(*a)
            handed.append(len(data))
            return data
        monkeypatch.setattr(tier.rsm, name, counted)
    from engine.config import BrokerConfig

    report = scrub_tier_module.scrub_tier(
        tier.rsm, lambda: open_remote_log_metadata_reader(BrokerConfig(dict(tier.props))),
        max_bytes_per_second=1000)
    assert report.clean, report.summary()
    logs = sum(md.segment_size_in_bytes for md in segs)
    manifests = 0
    if tier.kind == "s3":
        manifests = sum(tier.rsm.store.head(tier.key(md, "rsm-manifest")).size for md in segs)
    assert sum(handed) > logs  # the logs and every index
    assert sum(asked) == report.bytes_read == sum(handed) + manifests


def test_a_time_index_entry_later_than_the_records(tier):
    def later(data):  # the first entry's timestamp a second after its records'
        ts, rel = struct.unpack_from(">qi", data, 0)
        return struct.pack(">qi", ts + 1000, rel) + data[12:]
    seg = tier.segment(0, 9, [(0, 0)], mangle={".timeindex": later})
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and kinds(report) == [("index-mismatch", 2, 2)]
    assert report["findings"][0]["key"] == tier.key(
        seg, ".timeindex" if tier.kind == "fs" else "indexes")
    assert "time index entry" in report["findings"][0]["detail"]


def test_batches_whose_epoch_the_leader_epoch_index_does_not_give(tier):
    # the segment's checkpoint says epoch 1 began at offset 5; its batches carry epoch 0
    seg = tier.segment(0, 9, [(0, 0)], mangle={
        ".leader_epoch_checkpoint": lambda _: b"0\n2\n0 0\n1 5\n"})
    tier.segment(10, 19, [(0, 0)])  # the latest leader's lineage: epoch 0 throughout
    rc, report, _ = scrub_json(tier)
    assert rc == 1 and kinds(report) == [("index-mismatch", 6, 8)]
    f = report["findings"][0]
    assert f["key"] == tier.key(seg, ".leader_epoch_checkpoint" if tier.kind == "fs"
                                else "indexes")
    assert "leader epoch 0, the leader-epoch index says 1" in f["detail"]


def test_objects_of_a_partition_the_rlmm_never_knew_are_not_orphans(tier):
    from engine.common import Uuid
    from engine.remote.metadata import TopicIdPartition

    tier.segment(0, 9, [(0, 0)])
    own = tier.tip
    tier.tip = TopicIdPartition(Uuid.random(), "other", 3)
    stranger = tier.segment(40, 49, [(0, 0)], record=False)
    tier.tip = own
    rc, report, _ = scrub_json(tier, "--delete-orphans", "--no-dry-run")
    assert rc == 1 and kinds(report) == [("unknown-partition", 40, None)]
    f = report["findings"][0]
    assert f["partition"] == "other-3" and tier.key(stranger, LOG[tier.kind]).startswith(f["key"])
    assert report["orphans_deleted"] == []
    assert all(tier.exists(k) for k in tier.keys(stranger))


def test_an_engine_tiered_filesystem_tier_is_clean(tmp_path):
    """Transactions (some aborted), producer snapshots and two leader epochs, tiered by
    the RemoteLogManager onto the filesystem tier."""
    from spark_support import TieredCluster

    cluster = TieredCluster(tmp_path)
    cluster.produce_and_tier("events", 2, 600)
    rc, out, err = scrub("--config", str(cluster.config), "--json")
    assert rc == 0, (out, err)
    report = json.loads(out)
    assert report["clean"] and report["partitions"] == 2 and report["segments"] > 4
    assert report["bytes_read"] > sum(p.stat().st_size
                                      for p in (tmp_path / "tier").rglob("*.log"))


def test_the_broker_chunk_cache_does_not_hide_damage(tmp_path, s3_server):
    """A disk chunk cache keeps chunks across restarts: a scrub reading through it would
    check the cached chunk, not the object."""
    tier = HandTier(tmp_path, "s3", s3_server)
    try:
        seg = tier.segment(0, 9, [(0, 0)])
        with tier.config.open("a") as f:
            f.write("rsm.config.fetch.chunk.cache.class="
                    "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache\n"
                    f"rsm.config.fetch.chunk.cache.path={tmp_path / 'cache'}\n"
                    "rsm.config.fetch.chunk.cache.size=10000000\n")
        rc, report, _ = scrub_json(tier)
        assert rc == 0, report
        key = tier.key(seg, "log")
        data = bytearray(tier.rsm.store.get(key))
        data[70] ^= 0xFF
        tier.rsm.store.put_bytes(key, bytes(data))
        rc, report, _ = scrub_json(tier)
        assert rc == 1 and kinds(report) == [("corrupt-batch", 0, 9)]
    finally:
        tier.close()
