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
from broker_support import broker_template

from engine.log.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from engine.records import RecordBatchBuilder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BROKER = broker_template()

PARTITION = ["--topic", "orders", "--partition", "0"]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], check=False, cwd=ROOT,
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
    (["list-offsets", *PARTITION, "--time", "-100"], ["--time", "-100"]),
    (["list-offsets", *PARTITION, "--time", str(2**64)], ["--time", "9223372036854775807"]),
    (["list-offsets", *PARTITION, "--time", str(2**63)], ["--time"]),
    (["list-offsets", *PARTITION, "--time", "yesterday"], ["--time", "earliest"]),
    (["fetch", "--topic", "orders", "--partition", "7", "--offset", "0"],
     ["no log for partition orders-7"]),
    (["list-offsets", "--topic", "nope", "--partition", "0", "--time", "-1"],
     ["no log for partition nope-0"]),
])
def test_bad_arguments_are_one_line_and_exit_2(broker, argv, needles):
    proc = cli(argv[0], "--config", broker, *argv[1:])
    assert_usage_error(proc, *needles)


def test_list_offsets_max_timestamp_spec_is_served_or_refused_in_one_line(broker):
    """-3 (MAX_TIMESTAMP) is Kafka's: served where ListOffsets answers it, else a one-line
    refusal; never a traceback."""
    proc = cli("list-offsets", "--config", broker, *PARTITION, "--time", "-3")
    if proc.returncode == 0:
        assert proc.stdout.strip() == "orders:0:19", proc.stdout
    else:
        assert_usage_error(proc, "--time", "-3")


def test_produce_demo_log_dir_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    proc = cli("produce-demo", "--log-dirs", str(tmp_path / "f"), "--topic", "t")
    assert_usage_error(proc, str(tmp_path / "f"), "not a directory")


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


# -- 12: a broker without tiered storage is still a broker ------------------------------


@pytest.fixture
def local_broker(tmp_path):
    """A broker file without remote.log.storage.system.enable; `orders` has 20 records
    (timestamps 1_600_000_000_000 + offset) in several segments."""
    (tmp_path / "d1").mkdir()
    path = tmp_path / "server.properties"
    path.write_text(f"log.dirs={tmp_path / 'd1'}\nlog.segment.bytes=700\n")
    from engine.config import load_broker_config

    broker = load_broker_config(path)
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        manager.get_or_create_log("orders", 0)
        for i in range(20):
            builder = RecordBatchBuilder()
            builder.append(b"v%d" % i, timestamp=1_600_000_000_000 + i)
            manager.append_as_leader("orders", 0, builder.build(), 0)
        assert len(manager.get_log("orders", 0).segments) > 2
    return str(path)


def test_fetch_list_offsets_and_status_read_a_broker_without_tiering(local_broker, tmp_path):
    proc = cli("fetch", "--config", local_broker, *PARTITION, "--offset", "3", "--to-end",
               "--json")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["offset"] for r in rows] == list(range(3, 20))
    assert "high watermark 20" in proc.stderr
    for spec, offset in (("earliest", 0), ("latest", 20), ("earliest-local", 0),
                         ("latest-tiered", -1), ("1600000000007", 7)):
        proc = cli("list-offsets", "--config", local_broker, *PARTITION, "--time", spec)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"orders:0:{offset}"
    proc = cli("status", "--config", local_broker, "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["remote_storage_enable"] is False and row["log_end_offset"] == 20
    assert row["local_segments"] > 2
    proc = cli("status", "--config", local_broker)
    _, line = proc.stdout.splitlines()
    assert line.split()[:5] == ["orders-0", "0", "0", "20", "off"]
    assert proc.stderr == ""
    # nothing of a tier was made: no metadata log, no index cache
    assert sorted(n for n in os.listdir(tmp_path / "d1") if not n.startswith(".")) == [
        "log-start-offset-checkpoint", "orders-0", "recovery-point-offset-checkpoint"]
    proc = cli("fetch", "--config", local_broker, *PARTITION, "--offset", "21")
    assert_usage_error(proc, "OffsetOutOfRangeError")


def test_run_still_needs_tiering_and_says_why(local_broker):
    proc = cli("run", "--config", local_broker, "--until-idle")
    assert_usage_error(proc, "remote.log.storage.system.enable", "RemoteLogManager",
                       "fetch, list-offsets and status", local_broker)


# -- 15: status, compact by default, everything with --all / --json ---------------------


def test_status_compact_view_fits_120_columns_and_all_shows_every_field(broker):
    assert cli("configs", "--config", broker, "--entity-name", "orders", "--alter",
               "--add-config", "remote.storage.enable=true").returncode == 0
    from engine.config import load_broker_config

    config = load_broker_config(broker)
    with LogManager(config.log_dirs, broker_config=config) as manager:
        for i in range(40):  # 4 KiB segments: several to tier
            builder = RecordBatchBuilder()
            builder.append(b"w" * 500, timestamp=1_600_000_000_000 + i)
            manager.append_as_leader("orders", 0, builder.build(), 0)
    tiering = cli("run", "--config", broker, "--until-idle")
    assert tiering.returncode == 0, tiering.stderr
    proc = cli("status", "--config", broker, "--json")
    (row,) = json.loads(proc.stdout)
    assert row["remote_segments"] >= 1
    proc = cli("status", "--config", broker)
    assert proc.returncode == 0, proc.stderr
    header, line = proc.stdout.splitlines()
    assert header.split() == ["partition", "log-start", "local-start", "end",
                              "tiered", "local", "remote", "copy-lag", "last-error"]
    assert max(len(header), len(line)) <= 120
    cells = line.split()
    assert cells[:5] == ["orders-0", str(row["log_start_offset"]),
                         str(row["local_log_start_offset"]), str(row["log_end_offset"]),
                         str(row["highest_offset_in_remote_storage"])]
    assert cells[-1] == "-"  # no error
    proc = cli("status", "--config", broker, "--all")
    lines = proc.stdout.splitlines()
    assert lines[0] == "orders-0"
    shown = {ln.split()[0]: ln.split(None, 1)[1] for ln in lines[1:]}
    assert set(shown) == set(row)  # every field, whatever status() grows
    assert shown["remote_segments"] == str(row["remote_segments"])
    assert max(len(ln) for ln in lines) < 200


def test_status_compact_view_shows_any_error_like_field():
    from engine.cli.status import compact_table, error_fields

    base = {"topic": "t", "partition": 3, "log_start_offset": 0, "local_log_start_offset": 5,
            "log_end_offset": 9, "highest_offset_in_remote_storage": 4,
            "local_size_bytes": 2048, "remote_size_bytes": 3 << 20, "copy_lag_segments": 1,
            "copy_lag_bytes": 1536, "last_copy_error": None, "copy_failures": 0}
    assert error_fields(base) == []
    flagged = dict(base, offline=True, offline_error="CorruptRemoteLogMetadataError: x",
                   remote_metadata_gap={"log_start_offset": 0})
    line = compact_table([flagged]).splitlines()[1]
    assert "  offline: CorruptRemote" in line and line.endswith(" (+2 more)")
    assert compact_table([dict(base, remote_metadata_gap={"at": 0})]).endswith(
        '  remote_metadata_gap: {"at": 0}')
    rows = [dict(base, offline=True),
            dict(base, partition=4, damaged_segments=[12],
                 last_expiration_error="RemoteStorageError: " + "x" * 300),
            dict(base, partition=5, last_copy_error="CorruptRecordError: at 17")]
    table = compact_table(rows).splitlines()
    assert all(len(ln) <= 120 for ln in table)
    assert table[1].endswith("  offline")
    assert table[2].endswith("  damaged_segments: [12] (+1 more)")
    assert table[3].endswith("  copy: CorruptRecordError: at 17")
    assert "2.0 KiB" in table[1] and "3.0 MiB" in table[1] and "1 (1.5 KiB)" in table[1]


# -- 14: produce-demo stamps records from the current time ------------------------------


def _timestamps(log_dir, topic="orders", partition=0) -> list[int]:
    with LogManager([log_dir]) as manager:
        unified = manager.get_log(topic, partition)
        data = bytes(unified.read(unified.log_start_offset, 1 << 30)[0])
        for segment in unified.segments[1:]:
            data += bytes(unified.read(segment.base_offset, 1 << 30)[0])
    from engine.records import MemoryRecords

    return [r.timestamp for b in MemoryRecords(data).batches() for r in b]


def test_produce_demo_data_survives_the_default_retention_of_the_first_run(tmp_path):
    """Kafka's default log.retention.ms (7 days) on the first `run`: nothing produced by
    produce-demo is deleted (its records used to be stamped in November 2023)."""
    import time

    before = int(time.time() * 1000)
    proc = cli("produce-demo", "--log-dirs", str(tmp_path / "d1"), "--topic", "orders",
               "--records", "2000", "--segment-bytes", "65536", "--codec", "lz4")
    after = int(time.time() * 1000)
    assert proc.returncode == 0, proc.stderr
    stamps = _timestamps(tmp_path / "d1")
    assert after - 7 * 24 * 3600 * 1000 < min(stamps) and max(stamps) <= after
    assert max(stamps) >= before - 5 * 2000  # from the current time, not a fixed date
    (tmp_path / "tier").mkdir()
    path = _write_broker(tmp_path, "log.dirs={d1}\nremote.log.storage.system.enable=true\n"
                         "rsm.config.dirs={tier}\nremote.storage.enable=true\n"
                         "log.local.retention.bytes=65536\n")
    proc = cli("run", "--config", path, "--until-idle")
    assert proc.returncode == 0, proc.stderr
    assert "copied" in proc.stderr and "deleted 0 remote" in proc.stderr
    proc = cli("list-offsets", "--config", path, *PARTITION, "--time", "earliest")
    assert proc.stdout.strip() == "orders:0:0"
    proc = cli("status", "--config", path, "--json")
    (row,) = json.loads(proc.stdout)
    assert row["remote_segments"] >= 1 and row["log_start_offset"] == 0


def test_produce_demo_start_timestamp_makes_the_data_reproducible(tmp_path):
    def produce(d):
        proc = cli("produce-demo", "--log-dirs", str(d), "--topic", "orders", "--records",
                   "500", "--seed", "3", "--start-timestamp", "1700000000000")
        assert proc.returncode == 0, proc.stderr
        with open(d / "orders-0" / ("0" * 20 + ".log"), "rb") as f:
            return f.read()

    assert produce(tmp_path / "a") == produce(tmp_path / "b")
    stamps = _timestamps(tmp_path / "a")
    assert 1_700_000_000_000 <= stamps[0] <= 1_700_000_000_004
    assert_usage_error(cli("produce-demo", "--log-dirs", str(tmp_path / "c"), "--topic", "t",
                           "--start-timestamp", "-1"), "--start-timestamp")
