"""Bad input and Kafka's conventions at the command line, each run as a real
`python -m engine ...` subprocess: one `error: ...` line and exit status 2 for bad input
(never a traceback), brokers without tiering served from their local logs, missing log
and tier dirs created as Kafka creates them, produce-demo's timestamps, status's views."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from engine.log.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from engine.records import RecordBatchBuilder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BROKER = """\
log.dirs={d1},{d2}
remote.log.storage.system.enable=true
rsm.config.dirs={tier}
log.segment.bytes=4096
log.retention.ms=-1
log.local.retention.bytes=8192
remote.log.manager.task.interval.ms=100
"""

PARTITION = ["--topic", "orders", "--partition", "0"]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def assert_usage_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2 with exactly one stderr line, `error: ...`, naming each of `needles`."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def _write_broker(tmp_path, text=BROKER, **dirs) -> str:
    paths = {k: tmp_path / k for k in ("d1", "d2", "tier")}
    paths.update(dirs)
    path = tmp_path / "server.properties"
    path.write_text(text.format(**paths))
    return str(path)


def _fill(log_dirs, batches=20, topic="orders", partitions=(0,)):
    with LogManager(log_dirs) as manager:
        for p in partitions:
            manager.get_or_create_log(topic, p)
            for i in range(batches):
                builder = RecordBatchBuilder()
                builder.append(b"v%d" % i, timestamp=1_600_000_000_000 + i)
                manager.append_as_leader(topic, p, builder.build(), 0)


@pytest.fixture
def broker(tmp_path):
    """A tiered broker file; topic `orders` (one partition, 20 one-record batches)."""
    for k in ("d1", "d2", "tier"):
        (tmp_path / k).mkdir()
    _fill([tmp_path / "d1", tmp_path / "d2"])
    return _write_broker(tmp_path)


# -- 11: bad input is one line and exit 2 -----------------------------------------------


@pytest.mark.parametrize("argv, needles", [
    (["fetch", *PARTITION, "--offset", "0", "--max-bytes", "-1"], ["--max-bytes", "-1"]),
    (["fetch", *PARTITION, "--offset", "0", "--max-bytes", str(2**63)],
     ["--max-bytes", "2147483647"]),
    (["fetch", *PARTITION, "--offset", "0", "--max-bytes", str(2**31)], ["--max-bytes"]),
    (["fetch", *PARTITION, "--offset", "0", "--max-bytes", "9" * 100_000], ["--max-bytes"]),
    (["fetch", "--topic", "orders", "--partition", str(2**31), "--offset", "0"],
     ["--partition"]),
    (["fetch", *PARTITION, "--offset", str(2**63)], ["--offset"]),
    (["list-offsets", *PARTITION, "--time", "-3"], ["--time", "-3"]),
    (["list-offsets", *PARTITION, "--time", "-100"], ["--time", "-100"]),
    (["list-offsets", *PARTITION, "--time", str(2**64)], ["--time", "9223372036854775807"]),
    (["list-offsets", *PARTITION, "--time", str(2**63)], ["--time"]),
    (["list-offsets", *PARTITION, "--time", "yesterday"], ["--time", "earliest"]),
])
def test_bad_arguments_are_one_line_and_exit_2(broker, argv, needles):
    proc = cli(argv[0], "--config", broker, *argv[1:])
    assert_usage_error(proc, *needles)


def test_largest_int64_timestamp_and_int32_max_bytes_are_accepted(broker):
    proc = cli("list-offsets", "--config", broker, *PARTITION, "--time", str(2**63 - 1))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "orders:0:-1"  # no record that late
    proc = cli("fetch", "--config", broker, *PARTITION, "--offset", "0", "--max-bytes",
               str(2**31 - 1))
    assert proc.returncode == 0, proc.stderr
    assert "fetched 20 records" in proc.stderr


@pytest.mark.parametrize("offset", ["21", "500"])
def test_offset_out_of_range_exits_2_as_documented(broker, offset):
    proc = cli("fetch", "--config", broker, *PARTITION, "--offset", offset)
    assert_usage_error(proc, "OffsetOutOfRangeError", f"fetch offset {offset}", "[0, 20]")


def test_properties_value_of_ten_million_digits(broker):
    with open(broker, "a") as f:
        f.write("log.segment.bytes=" + "9" * 10_000_000 + "\n")
    proc = cli("status", "--config", broker)
    assert_usage_error(proc, "log.segment.bytes", "out of range", "10000000 characters",
                       broker)
    assert len(proc.stderr) < 400


def test_binary_garbage_is_not_a_properties_file(tmp_path):
    path = tmp_path / "garbage.properties"
    path.write_bytes(bytes(range(256)) * 12)
    proc = cli("status", "--config", str(path))
    assert_usage_error(proc, "not a properties file", str(path))
    assert "/tmp/kafka-logs" not in proc.stderr
    assert not os.path.exists("/tmp/kafka-logs") or os.path.isdir("/tmp/kafka-logs")


def test_a_file_setting_no_log_dir_does_not_create_kafkas_default(tmp_path):
    path = tmp_path / "notes.properties"
    path.write_text("just some notes\n")
    proc = cli("list-offsets", "--config", str(path), *PARTITION, "--time", "latest")
    if not os.path.isdir("/tmp/kafka-logs"):
        assert proc.returncode == 2, proc.stderr
        *warnings, last = proc.stderr.splitlines()
        assert warnings == [f"{path}: 'just' is not a config the engine uses; ignored"]
        assert last.startswith("error: ") and "neither log.dirs nor log.dir" in last
        assert not os.path.exists("/tmp/kafka-logs")


def test_index_cache_path_that_is_a_file(broker, tmp_path):
    assert cli("configs", "--config", broker, "--entity-name", "orders", "--alter",
               "--add-config", "remote.storage.enable=true").returncode == 0
    cache = tmp_path / "d1" / "remote-log-index-cache"
    cache.write_text("not a directory")
    for argv in (["status"], ["list-offsets", *PARTITION, "--time", "earliest"],
                 ["fetch", *PARTITION, "--offset", "0"]):
        proc = cli(argv[0], "--config", broker, *argv[1:])
        assert_usage_error(proc, str(cache), "EEXIST")
    assert (tmp_path / "d1" / CLEAN_SHUTDOWN_FILE).exists()  # closed cleanly again


@pytest.mark.parametrize("tier, how", [
    ("{d1}", "is the log dir"),
    ("{d2}/tier", "is inside the log dir"),
    ("{base}", "contains the log dir"),
    ("{tier},{d1}/..", "contains the log dir"),
])
def test_filesystem_tier_inside_a_log_dir_is_refused_at_load(tmp_path, tier, how):
    for k in ("d1", "d2", "tier"):
        (tmp_path / k).mkdir()
    _fill([tmp_path / "d1", tmp_path / "d2"])
    text = BROKER.replace("rsm.config.dirs={tier}", "rsm.config.dirs=" + tier)
    path = _write_broker(tmp_path, text, base=tmp_path)
    before = sorted(os.listdir(tmp_path / "d1")) + sorted(os.listdir(tmp_path / "d2"))
    proc = cli("status", "--config", path)
    assert_usage_error(proc, "rsm.config.dirs", how, path)
    assert sorted(os.listdir(tmp_path / "d1")) + sorted(os.listdir(tmp_path / "d2")) == before


# -- 13: missing log and tier dirs are created, as Kafka creates missing log dirs -------


def test_missing_log_and_tier_dirs_are_created_when_their_parent_exists(tmp_path):
    path = _write_broker(tmp_path)  # none of d1, d2, tier exists
    proc = cli("status", "--config", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "no partitions"
    for key, name in (("log.dirs", "d1"), ("log.dirs", "d2"), ("rsm.config.dirs", "tier")):
        assert (tmp_path / name).is_dir()
        assert f"{key}: directory {tmp_path / name} not found, creating it" in proc.stderr
    again = cli("status", "--config", path)
    assert again.returncode == 0 and "creating" not in again.stderr


@pytest.mark.parametrize("which", ["d2", "tier"])
def test_missing_parent_or_a_file_is_still_refused_and_nothing_is_created(tmp_path, which):
    (tmp_path / "d1").mkdir()
    path = _write_broker(tmp_path, **{which: tmp_path / "absent" / which})
    proc = cli("status", "--config", path)
    assert_usage_error(proc, "nor does its parent", str(tmp_path / "absent"), path)
    (tmp_path / "plain").write_text("")
    path = _write_broker(tmp_path, **{which: tmp_path / "plain"})
    proc = cli("status", "--config", path)
    assert_usage_error(proc, "exists but is not a directory", str(tmp_path / "plain"))
    assert sorted(os.listdir(tmp_path)) == ["d1", "plain", "server.properties"]
    assert os.listdir(tmp_path / "d1") == []  # validation first: nothing was opened
