"""`python -m engine demo`, the README's main job, end to end in a subprocess."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_writes_verifies_and_reports(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "demo", "--records", "1500", "--dir", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
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
