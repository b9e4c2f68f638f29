"""`python -m engine dump-log`: the printed view, --verify and the --json contract."""

import base64
import json
import os
import subprocess
import sys

import pytest

from engine.cli.dump_log import RECORD_JSON_KEYS
from engine.records import CompressionType, RecordBatchBuilder, build_end_txn_marker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VECTORS = os.path.join(ROOT, "..", "shared", "vectors")
KRAFT = os.path.join(VECTORS, "codecrafters-kafka-tester-kraft-datadir")


def dump(*args, check=None):
    proc = subprocess.run([sys.executable, "-m", "engine", "dump-log", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    if check is not None:
        assert proc.returncode == check, proc.stderr
    return proc


def _segment(tmp_path, name="00000000000000000000.log"):
    b = RecordBatchBuilder(base_offset=0, compression_type=CompressionType.GZIP,
                           producer_id=5, producer_epoch=1, base_sequence=0,
                           is_transactional=True, partition_leader_epoch=3)
    b.append(b"v0", key=b"k0", headers=[("h", b"\x00\xff"), ("n", None)], timestamp=111)
    b.append(None, key=None, timestamp=112)
    data = b.build() + build_end_txn_marker(False, base_offset=2, producer_id=5,
                                            producer_epoch=1, coordinator_epoch=9,
                                            timestamp=113, partition_leader_epoch=3)
    path = tmp_path / name
    path.write_bytes(data)
    return path, data


def test_json_has_exactly_the_contract_keys(tmp_path):
    path, _ = _segment(tmp_path)
    out = dump("--json", path, check=0).stdout.splitlines()
    rows = [json.loads(line) for line in out]
    assert [tuple(r) for r in rows] == [RECORD_JSON_KEYS] * 3
    first, tomb, marker = rows
    assert first == {
        "offset": 0, "timestamp": 111, "timestamp_type": "CreateTime",
        "key": base64.b64encode(b"k0").decode(), "value": base64.b64encode(b"v0").decode(),
        "headers": [["h", base64.b64encode(b"\x00\xff").decode()], ["n", None]],
        "batch_base_offset": 0, "magic": 2, "compression": "gzip", "is_transactional": True,
        "is_control": False, "producer_id": 5, "producer_epoch": 1, "base_sequence": 0,
        "partition_leader_epoch": 3}
    assert tomb["key"] is None and tomb["value"] is None and tomb["offset"] == 1
    assert marker["is_control"] and marker["offset"] == 2 and marker["compression"] == "none"
    assert marker["base_sequence"] == -1


def test_json_legacy_wrapper_names_first_inner_offset():
    # a fetch response, not a segment: cut its record set out into a temp segment file
    from vectors import load_blobs  # tests/vectors.py

    blob = load_blobs("kafka-rust-test-data/fetch1.mytopic.1p.gzip.kafka.0821")[0].data
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        seg = os.path.join(d, "00000000000000000000.log")
        with open(seg, "wb") as f:
            f.write(blob)
        rows = [json.loads(line) for line in dump("--json", seg, check=0).stdout.splitlines()]
    assert rows and {r["batch_base_offset"] for r in rows} == {rows[0]["offset"]}
    assert all(r["magic"] == 0 and r["timestamp"] == -1 for r in rows)
    assert all(r["timestamp_type"] == "NoTimestampType" and r["partition_leader_epoch"] is None
               for r in rows)
    assert [r["offset"] for r in rows] == list(range(len(rows)))


def test_print_data_log_shows_records(tmp_path):
    path, _ = _segment(tmp_path)
    out = dump("--print-data-log", path, check=0).stdout
    assert "baseOffset: 0 lastOffset: 1 count: 2" in out
    assert "compresscodec: gzip" in out and "isvalid: true" in out
    assert "| offset: 0 CreateTime: 111 keySize: 2 valueSize: 2 sequence: 0" in out
    assert "endTxnMarker: ABORT coordinatorEpoch: 9" in out


def test_verify_flags_bad_crc_with_position(tmp_path):
    path, data = _segment(tmp_path)
    bad = bytearray(data)
    bad[70] ^= 0xFF
    path.write_bytes(bytes(bad))
    proc = dump("--verify", path, check=1)
    assert "CRC mismatch in batch at position 0" in proc.stderr
    assert str(path) in proc.stderr


def test_verify_flags_partial_tail(tmp_path):
    path, data = _segment(tmp_path)
    path.write_bytes(data[:-5])
    proc = dump("--verify", path, check=1)
    assert "partial batch at position" in proc.stderr


def test_unknown_file_type_is_an_error(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("x")
    proc = dump(other, check=2)
    assert "unknown file type" in proc.stderr


@pytest.mark.parametrize("commit", ["e856b9a", "510714e"])
def test_verify_real_kafka_partition(commit, tmp_path):
    src = os.path.join(KRAFT, commit)
    logdir = os.path.join(src, "kraft-combined-logs")
    for part in ("foo-0", "__cluster_metadata-0"):
        part_dir = os.path.join(logdir, part)
        files = sorted(os.path.join(part_dir, f) for f in os.listdir(part_dir))
        files = [f for f in files if not f.endswith("quorum-state")]
        proc = dump("--verify", *files)
        assert proc.returncode == 0, proc.stderr
        assert "verify: OK" in proc.stderr
