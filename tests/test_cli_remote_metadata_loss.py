"""A lost remote-metadata directory of one partition, seen through the real commands
(subprocesses): the log start offset it no longer covers is kept, that partition is
neither tiered nor expired and its offsets below the local start are errors (exit 1, one
line), status says why, the other partition keeps tiering; putting the directory back
makes every command work again with nothing lost."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from broker_support import orders_broker
from test_cli_tiered import ROOT, _fill

from engine.cli import main
from engine.common import TopicPartition
from engine.log.checkpoint import OffsetCheckpointFile
from engine.remote.embedded_rlmm import METADATA_DIR_NAME


def _engine(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


def _start_offsets(dirs) -> dict:
    out = {}
    for d in ("d1", "d2"):
        path = dirs[d] / "log-start-offset-checkpoint"
        if path.exists():
            out.update(OffsetCheckpointFile(path).read())
    return out


def test_lost_metadata_directory_refuses_the_partition_until_restored(tmp_path):
    path, dirs = orders_broker(tmp_path)
    assert main(["configs", "--config", path, "--entity-name", "orders", "--alter",
                 "--add-config", "remote.storage.enable=true"]) == 0
    _fill(path)
    first = _engine("run", "--config", path, "--until-idle")
    assert first.returncode == 0, first.stderr
    earliest = _engine("list-offsets", "--config", path, "--topic", "orders", "--partition",
                       "0", "--time", "earliest-local")
    local_start = int(earliest.stdout.strip().rsplit(":", 1)[1])
    assert local_start > 0

    [lost] = (dirs["d1"] / METADATA_DIR_NAME).glob("orders-0-*")
    shutil.move(lost, tmp_path / "saved")
    _fill(path, batches=30)  # more to tier for both partitions
    before = _start_offsets(dirs)
    assert before[TopicPartition("orders", 0)] == 0

    for time_spec in ("earliest", "1600000000000"):
        out = _engine("list-offsets", "--config", path, "--topic", "orders", "--partition",
                      "0", "--time", time_spec)
        assert out.returncode == 1, (out.stdout, out.stderr)
        last = out.stderr.splitlines()[-1]
        assert last.startswith("error: RemoteLogMetadataGapError: orders-0: ") and \
            "Traceback" not in out.stderr, out.stderr
    latest = _engine("list-offsets", "--config", path, "--topic", "orders", "--partition",
                     "0", "--time", "latest")
    assert latest.returncode == 0, latest.stderr
    fetch = _engine("fetch", "--config", path, "--topic", "orders", "--partition", "0",
                    "--offset", "0")
    assert fetch.returncode == 1 and "RemoteLogMetadataGapError" in fetch.stderr, fetch.stderr
    fetch = _engine("fetch", "--config", path, "--topic", "orders", "--partition", "0",
                    "--offset", str(local_start))
    assert fetch.returncode == 0, fetch.stderr

    run = _engine("run", "--config", path, "--until-idle")
    assert run.returncode == 1 and "RemoteLogMetadataGapError" in run.stderr, run.stderr
    assert _start_offsets(dirs)[TopicPartition("orders", 0)] == 0  # never moved
    status = _engine("status", "--config", path, "--json")
    assert status.returncode == 0, status.stderr
    rows = {r["partition"]: r for r in json.loads(status.stdout)}
    assert f"offsets [0, {local_start - 1}] are in neither tier" in \
        rows[0]["remote_metadata_gap"]
    assert "RemoteLogMetadataGapError" in rows[0]["last_copy_error"]
    assert rows[0]["log_start_offset"] == 0 and rows[0]["copy_lag_segments"] > 0
    assert rows[1]["remote_metadata_gap"] is None and rows[1]["copy_lag_segments"] == 0
    assert rows[1]["last_copy_error"] is None

    # the directory back: everything works again and nothing is lost
    assert not lost.exists()  # no command wrote metadata for the refused partition
    shutil.move(tmp_path / "saved", lost)
    run = _engine("run", "--config", path, "--until-idle")
    assert run.returncode == 0, run.stderr
    earliest = _engine("list-offsets", "--config", path, "--topic", "orders", "--partition",
                       "0", "--time", "earliest")
    assert (earliest.returncode, earliest.stdout.strip()) == (0, "orders:0:0"), earliest.stderr
    fetch = _engine("fetch", "--config", path, "--topic", "orders", "--partition", "0",
                    "--offset", "0", "--to-end")
    assert fetch.returncode == 0, fetch.stderr
    assert "fetched 450 records (offsets 0..449)" in fetch.stderr, fetch.stderr
    status = json.loads(_engine("status", "--config", path, "--json").stdout)
    assert all(r["remote_metadata_gap"] is None and r["copy_lag_segments"] == 0
               for r in status)
