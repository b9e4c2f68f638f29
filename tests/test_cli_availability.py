"""Availability under damage and a failing tier, through real `python -m engine`
processes: a partition whose remote log metadata is damaged fails alone (the others are
tiered, read and reported), and a full (ENOSPC) or read-only (EROFS) tier ends
`run --until-idle` with exit 1 and errors naming the errno, file and partition, instead of
a BufferError, an endless loop or a metadata log that grows with every retry.

The full and read-only tiers are real filesystems: a small tmpfs mounted on the tier dir
(remounted read-only for EROFS). Mounting needs root (CAP_SYS_ADMIN); where it is refused
those tests are skipped with the mount's error, and
test_remote_storage.py::test_enospc_in_the_fallback_copy_is_a_remote_storage_error covers
the ENOSPC path without a mount.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from broker_support import orders_broker
from test_cli_tiered import ROOT, _fill

from engine.cli.run import PASSES_WITHOUT_PROGRESS

TIMEOUT_S = 120  # bound of one command, never a timing claim
# fast retries so the bounded --until-idle gives up quickly (5 passes: 20+40+80+100 ms)
FAST_RETRY = ("remote.log.manager.task.retry.backoff.ms=20\n"
              "remote.log.manager.task.retry.backoff.max.ms=100\n")


def _engine(*args, check_rc=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, check=False,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def _broker(tmp_path: Path, extra: str = "") -> tuple[str, dict]:
    """Topic `orders` (two partitions) with tiering on, filled with many 4 KiB segments."""
    path, dirs = orders_broker(tmp_path, FAST_RETRY + extra)
    _engine("configs", "--config", path, "--entity-name", "orders", "--alter",
            "--add-config", "remote.storage.enable=true", check_rc=0)
    _fill(path)
    return path, dirs


def _metadata_log(dirs, partition: int) -> Path:
    return next((dirs["d1"] / "__remote_log_metadata").glob(f"orders-{partition}-*/*.log"))


def _tier_logs(dirs, partition: int) -> int:
    return sum(1 for _ in dirs["tier"].glob(f"kafka-tiered-storage/orders-{partition}-*/*.log"))


# ---- point: one damaged partition fails alone ------------------------------------------

def _flip_mid_file(path: Path) -> int:
    """Flips one bit in the middle of the metadata log (not its tail); the position."""
    data = bytearray(path.read_bytes())
    pos = len(data) // 2
    data[pos] ^= 0x01
    path.write_bytes(data)
    return pos


def test_damaged_metadata_of_one_partition_leaves_the_others_working(tmp_path):
    path, dirs = _broker(tmp_path)
    _engine("run", "--config", path, "--until-idle", check_rc=0)
    tiered_1 = _tier_logs(dirs, 1)
    damaged = _metadata_log(dirs, 0)
    _flip_mid_file(damaged)
    before = damaged.read_bytes()
    _fill(path)  # more to tier in both partitions

    # run: partition 1's new segments are tiered; partition 0 is reported, exit 1
    run = _engine("run", "--config", path, "--until-idle", check_rc=1)
    assert _tier_logs(dirs, 1) > tiered_1, run.stderr
    assert "CorruptRemoteLogMetadataError" in run.stderr and str(damaged) in run.stderr
    assert "orders-0" in run.stderr and "offline" in run.stderr
    assert "Traceback" not in run.stderr
    assert damaged.read_bytes() == before  # never rewritten: it can be inspected

    # fetch of the healthy partition from offset 0 (remote) works
    fetch = _engine("fetch", "--config", path, "--topic", "orders", "--partition", "1",
                    "--offset", "0", "--to-end", check_rc=0)
    assert fetch.stdout.count("\n") == 2 * 60 * 5
    # the damaged one is a clear error naming the file, the position and the partition
    bad = _engine("fetch", "--config", path, "--topic", "orders", "--partition", "0",
                  "--offset", "0")
    error = bad.stderr.splitlines()[-1]  # after the log line of the RLMM finding it
    assert bad.returncode == 1 and error.startswith("error: "), bad.stderr
    assert "CorruptRemoteLogMetadataError" in error and str(damaged) in error
    assert "position" in error and "orders-0" in error
    assert "Traceback" not in bad.stderr

    # ListOffsets likewise
    assert _engine("list-offsets", "--config", path, "--topic", "orders", "--partition", "1",
                   "--time", "earliest", check_rc=0).stdout.strip() == "orders:1:0"
    bad = _engine("list-offsets", "--config", path, "--topic", "orders", "--partition", "0",
                  "--time", "latest")
    assert bad.returncode == 1 and "CorruptRemoteLogMetadataError" in bad.stderr

    # status shows partition 1 as usual and partition 0 offline, with the error
    status = _engine("status", "--config", path, "--json", check_rc=0)
    rows = {r["partition"]: r for r in json.loads(status.stdout)}
    assert rows[1]["offline"] is False and rows[1]["remote_segments"] > 0
    assert rows[0]["offline"] is True
    assert str(damaged) in rows[0]["offline_error"]
    assert "position" in rows[0]["offline_error"]


# ---- point: a full or read-only tier --------------------------------------------------

@pytest.fixture
def tmpfs_tier():
    """Mounts a tmpfs of `size` on a dir (remount read-only with `.read_only()`); unmounts
    at the end. Skips where mounting is refused (needs root)."""
    mounted = []

    class Mount:
        def __call__(self, directory: Path, size: str) -> None:
            proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                   str(directory)], check=False, capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs tier: {proc.stderr.strip()}")
            mounted.append(directory)

        def read_only(self, directory: Path) -> None:
            subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True)

    try:
        yield Mount()
    finally:
        for directory in mounted:
            subprocess.run(["umount", str(directory)], check=True)


def _passes(stderr: str) -> int:
    return sum(line.startswith("pass ") for line in stderr.splitlines())


def test_full_tier_ends_until_idle_with_enospc_named(tmp_path, tmpfs_tier):
    path, dirs = _broker(tmp_path)
    tmpfs_tier(dirs["tier"], "48k")  # room for a few segments of the 36
    run = _engine("run", "--config", path, "--until-idle", check_rc=1)
    err = run.stderr
    assert "BufferError" not in err and "Traceback" not in err, err
    assert "ENOSPC" in err and str(dirs["tier"]) in err and "orders-0" in err
    assert f"giving up after {PASSES_WITHOUT_PROGRESS} passes" in err
    assert _passes(err) <= PASSES_WITHOUT_PROGRESS + 1, err  # one pass copied, then stalls
    # no half-written file is left in the tier
    assert not list(dirs["tier"].rglob("*.tmp"))


def test_read_only_tier_backs_off_and_records_each_delete_once(tmp_path, tmpfs_tier):
    path, dirs = _broker(tmp_path)
    tmpfs_tier(dirs["tier"], "4m")
    _engine("run", "--config", path, "--until-idle", check_rc=0)
    remote = _tier_logs(dirs, 0)
    tmpfs_tier.read_only(dirs["tier"])
    _engine("configs", "--config", path, "--entity-name", "orders", "--alter",
            "--add-config", "retention.bytes=20000", check_rc=0)
    log_size = _metadata_log(dirs, 0).stat().st_size

    first = _engine("run", "--config", path, "--until-idle", check_rc=1)
    err = first.stderr
    assert "EROFS" in err and "orders-0" in err and str(dirs["tier"]) in err, err
    assert f"giving up after {PASSES_WITHOUT_PROGRESS} passes" in err
    # one warning per failed run (each after its backoff), not one per segment and retry
    warnings = [line for line in err.splitlines() if line.startswith("Expiration task of")]
    assert 0 < len(warnings) <= 2 * (PASSES_WITHOUT_PROGRESS + 1), err
    assert all("error(s)" in line for line in warnings)
    grown = _metadata_log(dirs, 0).stat().st_size
    assert grown > log_size  # each due segment got its DELETE_SEGMENT_STARTED once ...

    # ... and retries (this process's and the next one's) add nothing
    _engine("run", "--config", path, "--until-idle", check_rc=1)
    assert _metadata_log(dirs, 0).stat().st_size == grown
    assert _tier_logs(dirs, 0) == remote
