"""The operator's commands: configs, run, fetch, list-offsets, status (most in-process
through engine.cli.main; a few as real subprocesses)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from broker_support import broker_template, orders_broker

from engine.cli import main
from engine.cli.configs import parse_add_config
from engine.config import TOPIC_CONFIG_STORE_FILE, ConfigError
from engine.log.log_manager import CLEAN_SHUTDOWN_FILE, LogManager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BROKER = broker_template()


@pytest.fixture
def broker(tmp_path):
    """A broker file over two log dirs and a filesystem tier, with topic `orders` (two
    partitions) created and shut down cleanly."""
    return orders_broker(tmp_path)


def _snapshot(dirs) -> dict:
    """Every file's name and bytes under the log dirs (to show nothing was touched)."""
    out = {}
    for key in ("d1", "d2"):
        for root, _, files in os.walk(dirs[key]):
            for name in files:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    out[path] = f.read()
    return out


def test_parse_add_config_kafka_syntax():
    assert parse_add_config("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    for bad in ("novalue", "a=[x,y", "a=[x]y", "=1"):
        with pytest.raises(ConfigError):
            parse_add_config(bad)


def test_configs_alter_describe_delete(broker, capsys):
    path, dirs = broker
    assert main(["configs", "--config", path, "--entity-name", "orders", "--alter",
                 "--add-config", ("remote.storage.enable=true,local.retention.ms=60000,"
                                  "retention.ms=600000,cleanup.policy=[delete]")]) == 0
    assert "Completed updating config for topic orders." in capsys.readouterr().out
    stored = json.loads((dirs["d1"] / TOPIC_CONFIG_STORE_FILE).read_text())
    assert stored["topics"]["orders"] == {
        "cleanup.policy": "delete", "local.retention.ms": "60000", "remote.storage.enable":
        "true", "retention.ms": "600000"}
    assert main(["configs", "--config", path, "--topic", "orders", "--describe"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Dynamic configs for topic orders are:"
    assert "  local.retention.ms=60000" in out
    assert main(["configs", "--config", path, "--entity-name", "orders", "--describe",
                 "--all", "--json"]) == 0
    described = json.loads(capsys.readouterr().out)["orders"]
    assert described["local.retention.ms"] == {"value": 60000, "source":
                                               "DYNAMIC_TOPIC_CONFIG",
                                               "source_key": "local.retention.ms"}
    assert described["segment.bytes"]["source_key"] == "log.segment.bytes"
    assert described["local.retention.bytes"]["value"] == 8192
    assert main(["configs", "--config", path, "--entity-name", "orders", "--alter",
                 "--delete-config", "local.retention.ms,cleanup.policy"]) == 0
    stored = json.loads((dirs["d1"] / TOPIC_CONFIG_STORE_FILE).read_text())
    assert stored["topics"]["orders"] == {"remote.storage.enable": "true",
                                          "retention.ms": "600000"}


@pytest.mark.parametrize("argv, message", [
    (["--entity-name", "../x", "--alter", "--add-config", "retention.ms=1"], "illegal"),
    (["--entity-name", "a/b", "--alter", "--add-config", "retention.ms=1"], "illegal"),
    (["--entity-name", "nosuch", "--alter", "--add-config", "retention.ms=1"],
     "does not exist"),
    (["--entity-name", "orders", "--alter", "--add-config", "retention.mss=1"],
     "did you mean 'retention.ms'"),
    (["--entity-name", "orders", "--alter", "--add-config", "segment.bytes=big"],
     "segment.bytes"),
    (["--entity-name", "orders", "--alter", "--add-config",
      "remote.storage.enable=true,retention.ms=1000,local.retention.ms=5000"],
     "must be at most retention.ms"),
    (["--entity-name", "orders", "--alter", "--add-config",
      "remote.storage.enable=true,remote.log.copy.disable=true"],
     "when copy is disabled"),
    (["--entity-name", "orders", "--alter"], "--add-config or --delete-config"),
    (["--entity-name", "orders", "--alter", "--describe"], "exactly one"),
])
def test_configs_bad_input_is_a_clear_error_and_touches_nothing(broker, capsys, argv,
                                                                message):
    path, dirs = broker
    before = _snapshot(dirs)
    assert main(["configs", "--config", path, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert _snapshot(dirs) == before
    assert not (dirs["d1"] / TOPIC_CONFIG_STORE_FILE).exists()
    assert not os.path.exists(os.path.join(os.path.dirname(path), "x"))


def test_configs_needs_the_tiering_system_for_remote_storage(broker, tmp_path, capsys):
    _, dirs = broker
    off = tmp_path / "off.properties"
    off.write_text(f"log.dirs={dirs['d1']},{dirs['d2']}\n")
    assert main(["configs", "--config", str(off), "--entity-name", "orders", "--alter",
                 "--add-config", "remote.storage.enable=true"]) == 2
    assert "remote.log.storage.system.enable=true" in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["run", "--until-idle"],
    ["fetch", "--topic", "orders", "--partition", "0", "--offset", "0"],
    ["list-offsets", "--topic", "orders", "--partition", "0", "--time", "latest"],
    ["status"],
])
@pytest.mark.parametrize("edit, message", [
    (lambda text: text + "log.retention.byte=5\n", "did you mean 'log.retention.bytes'"),
    (lambda text: text + "retention.ms=5\n", "is a topic config"),
    (lambda text: text.replace("/d2", "/d3/d2"), "does not exist"),
    (lambda text: text + "log.local.retention.bytes=x\n", "expected a long"),
])
def test_commands_refuse_a_bad_broker_file_before_opening_anything(broker, capsys, command,
                                                                   edit, message):
    path, dirs = broker
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(edit(text))
    before = _snapshot(dirs)
    assert (dirs["d1"] / CLEAN_SHUTDOWN_FILE).exists()
    assert main([command[0], "--config", path, *command[1:]]) == 2
    err = capsys.readouterr().err
    assert message in err and path in err, err
    assert _snapshot(dirs) == before  # the clean-shutdown markers are still there


def test_commands_refuse_path_like_topics(broker, capsys):
    path, dirs = broker
    before = _snapshot(dirs)
    for command in (["fetch", "--offset", "0"], ["list-offsets", "--time", "earliest"]):
        assert main([command[0], "--config", path, "--topic", "../orders", "--partition", "0",
                     *command[1:]]) == 2
        assert "illegal" in capsys.readouterr().err
    assert _snapshot(dirs) == before


def test_stored_override_that_no_longer_passes_stops_the_start(broker, capsys):
    path, dirs = broker
    store = dirs["d1"] / TOPIC_CONFIG_STORE_FILE
    store.write_text(json.dumps({"version": 1, "topics": {
        "orders": {"remote.storage.enable": "true", "retention.ms": "1000",
                   "local.retention.ms": "5000"}}}))
    before = _snapshot(dirs)
    assert main(["status", "--config", path]) == 2
    err = capsys.readouterr().err
    assert str(store) in err and "local.retention.ms" in err
    assert _snapshot(dirs) == before


def test_second_process_on_the_same_log_dirs_is_refused(broker):
    """A live `run` holds the log dirs; `status` beside it fails at once, naming the dir."""
    path, dirs = broker
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys, time\n"
                                "from engine.cli._broker import open_broker\n"
                                "s = open_broker(sys.argv[1])\nprint('ready', flush=True)\n"
                                "sys.stdin.read()\ns.close()\n"), path],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        proc = subprocess.run([sys.executable, "-m", "engine", "status", "--config", path],
                              cwd=ROOT, capture_output=True, check=False, text=True, timeout=120)
        assert proc.returncode == 2
        assert "in use by another process" in proc.stderr and str(dirs["d1"]) in proc.stderr
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=120) == 0
    assert (dirs["d1"] / CLEAN_SHUTDOWN_FILE).exists()


def _fill(path, topic="orders", batches=60):
    """Appends `batches` batches of 5 records to each partition of `topic` (4 KiB
    segments: many of them), then shuts the logs down cleanly."""
    from engine.config import load_broker_config
    from engine.records import RecordBatchBuilder

    broker = load_broker_config(path)
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        for tp in manager.partitions():
            for _ in range(batches):
                builder = RecordBatchBuilder()
                for _ in range(5):
                    builder.append(b"v" * 100, timestamp=1_600_000_000_000)
                manager.append_as_leader(tp.topic, tp.partition, builder.build(), 0)


class _StderrLines:
    """The stderr lines of a running `python -m engine run`, read as they come, so a test
    waits for the state a line reports instead of sleeping."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(proc.stderr,), daemon=True)
        self._reader.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match:
        """The first line matching `pattern`, waiting for it at most `timeout` seconds."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                match = next(filter(None, map(regex.search, self.lines)), None)
                left = deadline - time.monotonic()
                if match is not None or left <= 0:
                    break
                self._changed.wait(left)
        assert match is not None, f"no line matching {pattern!r} in {timeout} s: {self.lines}"
        return match

    def text(self) -> str:
        """Everything read, once the process has ended."""
        self._reader.join(timeout=120)
        return "".join(self.lines)


def _tier_logs(dirs) -> int:
    return sum(name.endswith(".log") for _, _, files in os.walk(dirs["tier"])
               for name in files)


@pytest.mark.parametrize("when", ["idle", "copying"])
def test_run_stops_cleanly_on_sigterm(broker, when):
    """`run` (long-lived) tiers in the background; SIGTERM stops it with status 0, the
    logs closed cleanly (.kafka_cleanshutdown in both dirs), and a later run finds
    nothing broken: every segment not yet copied gets copied, nothing is copied twice."""
    import signal

    path, dirs = broker
    assert main(["configs", "--config", path, "--entity-name", "orders", "--alter",
                 "--add-config", "remote.storage.enable=true"]) == 0
    _fill(path)
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--config", path],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    stderr = _StderrLines(proc)
    try:
        if when == "copying":
            deadline = time.monotonic() + 120
            while _tier_logs(dirs) < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
        else:  # settled: run's status line says both partitions have nothing left to copy
            stderr.wait_for(r"run: 2 tiered partition\(s\), [1-9]\d* remote segment\(s\) "
                            r"\([\d.]+ MiB\), copy lag 0 segment\(s\)$")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = stderr.text()
    assert proc.returncode == 0, err
    assert "stopped cleanly" in err and "remote segment(s)" in err
    for d in ("d1", "d2"):
        assert (dirs[d] / CLEAN_SHUTDOWN_FILE).exists()
    first = subprocess.run([sys.executable, "-m", "engine", "run", "--config", path,
                            "--until-idle"], cwd=ROOT, capture_output=True, check=False, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr
    status = subprocess.run([sys.executable, "-m", "engine", "status", "--config", path,
                             "--json"], cwd=ROOT, capture_output=True, check=False, text=True,
                            timeout=300)
    rows = json.loads(status.stdout)
    assert len(rows) == 2
    for row in rows:
        assert row["copy_lag_segments"] == 0 and row["remote_segments"] >= 5
        assert row["remote_metadata_entries"] >= row["remote_segments"]
    if when == "idle":  # everything was copied before the stop: the restart copies nothing
        assert "copied" not in first.stderr


def _reference_committed(path, topic, partition):
    """Independent of the engine's consumer: (offset, value) of the records a
    read_committed consumer must see, from the local batches and their markers."""
    from engine.config import load_broker_config
    from engine.records import ControlRecordType, MemoryRecords, parse_control_record

    broker = load_broker_config(path)
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        unified = manager.get_log(topic, partition)
        assert unified.last_stable_offset == unified.log_end_offset
        data, offset = b"", 0
        while offset < unified.log_end_offset:
            chunk = bytes(manager.read(topic, partition, offset, 1 << 30)[0])
            data += chunk
            offset = list(MemoryRecords(chunk).batches())[-1].next_offset
    open_txn: dict[int, list] = {}
    kept = []
    for batch in MemoryRecords(data).batches():
        if batch.is_control:
            (marker,) = [parse_control_record(r.key, r.value) for r in batch]
            held = open_txn.pop(batch.producer_id, [])
            if marker.type is ControlRecordType.COMMIT:
                kept += held
        elif batch.is_transactional:
            open_txn.setdefault(batch.producer_id, []).extend(
                (r.offset, r.value) for r in batch)
        else:
            kept += [(r.offset, r.value) for r in batch]
    everything = sum(b.record_count for b in MemoryRecords(data).batches()
                     if not b.is_control)
    return sorted(kept), everything


def test_fetch_read_committed_over_the_tier(tmp_path):
    """produce-demo's generator (transactions, one in three aborted) tiered by `run`;
    `fetch --isolation-level read_committed` returns exactly the committed and
    non-transactional records, read_uncommitted every data record; one `fetch` without
    --to-end returns at least one whole batch from the tier."""
    import base64

    from engine.cli.produce_demo import produce_partition
    from engine.records import CompressionType

    dirs = {k: tmp_path / k for k in ("d1", "d2", "tier")}
    for d in dirs.values():
        d.mkdir()
    path = str(tmp_path / "server.properties")
    with open(path, "w") as f:
        f.write(BROKER.format(**dirs).replace("log.segment.bytes=4096",
                                              "log.segment.bytes=65536"))
    from engine.config import load_broker_config

    broker = load_broker_config(path)
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        manager.get_or_create_log("tx", 0)
        stats = produce_partition(manager, "tx", 0, 5000, CompressionType.LZ4, seed=7)
        assert stats["aborted"] >= 2 and stats["transactions"] > stats["aborted"]
        assert len(manager.get_log("tx", 0).segments) >= 8
    committed, data_records = _reference_committed(path, "tx", 0)
    assert len(committed) < data_records  # some transactions were aborted
    assert main(["configs", "--config", path, "--entity-name", "tx", "--alter",
                 "--add-config", "remote.storage.enable=true"]) == 0
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "--config", path,
                           "--until-idle"], cwd=ROOT, capture_output=True, check=False, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr

    def fetch(*extra):
        proc = subprocess.run([sys.executable, "-m", "engine", "fetch", "--config", path,
                               "--topic", "tx", "--partition", "0", "--offset", "0", "--json",
                               *extra], cwd=ROOT, capture_output=True, check=False, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr

    rows, err = fetch("--to-end", "--isolation-level", "read_committed")
    assert [(r["offset"], base64.b64decode(r["value"])) for r in rows] == committed
    assert " 0 from the remote tier" not in err and "last stable offset" in err
    rows, _ = fetch("--to-end")
    assert len(rows) == data_records and not any(r["is_control"] for r in rows)
    rows, err = fetch("--max-bytes", "1")
    assert rows and rows[0]["offset"] == 0 and "in 1 read(s), 1 from the remote tier" in err
    assert len({r["batch_base_offset"] for r in rows}) == 1  # min one message: one batch


def test_run_applies_configs_changed_while_it_runs(broker):
    """`configs --alter` beside a live `run` (it opens no log): run picks the stored
    override up within a second or so, here enabling tiering, and the segments go to the
    tier without a restart."""
    import signal

    path, dirs = broker
    _fill(path)
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--config", path],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    stderr = _StderrLines(proc)
    try:
        deadline = time.monotonic() + 120
        # running, its remote log manager asked (status), and tiering is off for the topic
        stderr.wait_for(r"run: 0 tiered partition\(s\), 0 remote segment\(s\)")
        assert _tier_logs(dirs) == 0  # not tiered yet
        alter = subprocess.run([sys.executable, "-m", "engine", "configs", "--config", path,
                                "--entity-name", "orders", "--alter", "--add-config",
                                "remote.storage.enable=true"], cwd=ROOT, capture_output=True,
                               check=False,
                               text=True, timeout=120)
        assert alter.returncode == 0, alter.stderr
        while _tier_logs(dirs) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _tier_logs(dirs) >= 4
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = stderr.text()
    assert proc.returncode == 0, err
    assert "applied topic config of orders" in err
