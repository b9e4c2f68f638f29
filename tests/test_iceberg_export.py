"""`python -m engine export --format iceberg`: a topic's tiered history appended to an Apache
Iceberg table of a SQL catalog (sqlite) with a local warehouse, read back with pyiceberg and
compared row by row with `python -m engine fetch --json`; later rounds add only new records;
a SIGKILL mid-round, then a resume, leaves every record in the table exactly once."""

import json
import os
import selectors
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from spark_support import REPO, TieredCluster, arrow_rows, fetch_row

from engine.arrow.iceberg import (
    SUMMARY_OFFSETS,
    SUMMARY_ROUND,
    SUMMARY_TOPIC,
    IcebergTarget,
    committed_state,
)

TOPIC = "exported"
TABLE = "kafka.exported"
KILL_POINT_TIMEOUT_S = 120


def target(base: Path) -> IcebergTarget:
    base.mkdir(parents=True, exist_ok=True)
    return IcebergTarget(f"sqlite:///{base / 'catalog.db'}", str(base / "warehouse"), TABLE)


def export(cluster, base: Path, *extra, source=None, check=True):
    source = source or ["--config", str(cluster.config)]
    t = target(base)
    run = subprocess.run([sys.executable, "-m", "engine", "export", *source, "--topic", TOPIC,
                          "--format", "iceberg", "--iceberg-catalog-uri", t.catalog_uri,
                          "--iceberg-warehouse", t.warehouse, "--iceberg-table", TABLE, *extra],
                         cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    if check:
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return run


def load(base: Path):
    return target(base).catalog().load_table(TABLE)


def fetched(cluster, partitions, headers=True):
    return sorted((fetch_row(TOPIC, p, r, headers=headers) for p in partitions
                   for r in cluster.fetch(TOPIC, p, 0)), key=lambda r: (r[3], r[4]))


def tier_ends(cluster) -> dict[int, int]:
    from engine.scan.planning import tier_bounds
    from engine.scan.tier import Tier

    with Tier(cluster.props) as tier:
        return {p: tier_bounds(tier.chain(tip))[1]
                for (t, p), tip in tier.partitions().items() if t == TOPIC}


def test_export_equals_fetch_and_a_later_round_adds_only_new_records(tmp_path):
    cluster = TieredCluster(tmp_path / "cluster")
    cluster.produce_and_tier(TOPIC, 2, 700, segment_bytes=32 << 10)
    base = tmp_path / "ice"
    first = export(cluster, base, "--include-headers", "--max-bytes-per-round", str(48 << 10))
    assert "round 2:" in first.stdout  # several commits
    table = load(base)
    rounds = [s for s in table.snapshots() if SUMMARY_OFFSETS in s.summary.additional_properties]
    assert len(rounds) == len(table.snapshots()) >= 2  # one snapshot per round, each stated
    assert arrow_rows(table.scan().to_arrow()) == fetched(cluster, (0, 1))
    state = committed_state(table, TOPIC)
    assert state.offsets == tier_ends(cluster)
    assert [f.name for f in table.spec().fields] == ["partition", "timestamp_day"]

    again = export(cluster, base, "--include-headers")  # nothing new: no commit
    assert "round" in again.stdout and len(load(base).snapshots()) == len(rounds)

    cluster.produce_and_tier(TOPIC, 2, 300, segment_bytes=32 << 10)
    export(cluster, base, "--include-headers")
    table = load(base)
    latest = table.current_snapshot()
    summary = latest.summary.additional_properties
    assert summary[SUMMARY_TOPIC] == TOPIC and int(summary[SUMMARY_ROUND]) == state.round + 1
    new = sum(end - state.offsets[p] for p, end in tier_ends(cluster).items())
    added = table.scan(snapshot_id=latest.snapshot_id).to_arrow().num_rows - \
        table.scan(snapshot_id=latest.parent_snapshot_id).to_arrow().num_rows
    got = arrow_rows(table.scan().to_arrow())
    want = fetched(cluster, (0, 1))
    assert got == want
    # the later round holds the records past the first export's offsets, control and aborted
    # records aside
    assert added == sum(1 for r in want if r[4] >= state.offsets[r[3]]) and 0 < added <= new
    assert json.loads(summary[SUMMARY_OFFSETS]) == {str(p): e
                                                    for p, e in tier_ends(cluster).items()}


def test_export_reads_a_bucket_alone(tmp_path, s3_server):
    prefix = f"iceberg-{uuid.uuid4().hex[:8]}/"
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": prefix, "rsm.config.chunk.size": "16384"}
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    cluster = TieredCluster(tmp_path / "cluster", props)
    cluster.produce_and_tier(TOPIC, 2, 400, segment_bytes=24 << 10)
    store = [a for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"
             for a in ("--store", f"{k}={v}")]
    base = tmp_path / "ice"
    export(cluster, base, "--max-bytes-per-round", str(32 << 10),
           source=["--bucket", f"s3://{s3_server.buckets[0]}/{prefix}", *store])
    assert arrow_rows(load(base).scan().to_arrow()) == fetched(cluster, (0, 1), headers=False)


def data_files(base: Path) -> set[Path]:
    return set(base.joinpath("warehouse").rglob("data/**/*.parquet"))


def newest_metadata(base: Path) -> float:
    return max((p.stat().st_mtime_ns for p in base.joinpath("warehouse")
                .rglob("metadata/*.metadata.json")), default=0)


def read_round_line(proc, rounds: int) -> None:
    """Returns when the export reports its `rounds`-th round: it prints "round N:" after the
    round's snapshot is in the catalog, so the round is committed when its line arrives."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            assert sel.select(KILL_POINT_TIMEOUT_S), f"no round {rounds} within the timeout"
            line = proc.stdout.readline().decode()
            assert line, f"the export ended before round {rounds}"
            if line.startswith("round ") and int(line.split()[1].rstrip(":")) >= rounds:
                return


def wait_for_kill_point(proc, base: Path, point: str) -> None:
    """Returns at `point`: "round-N" as soon as round N is committed (the kill then lands in
    the rounds after it); "written" when, after round 1, a data file newer than the table's
    newest metadata appears (a round written, not yet committed)."""
    if point.startswith("round-"):
        read_round_line(proc, int(point[6:]))
        return
    read_round_line(proc, 1)
    deadline = time.monotonic() + KILL_POINT_TIMEOUT_S
    while not any(f.stat().st_mtime_ns > newest_metadata(base) for f in data_files(base)):
        assert proc.poll() is None, "the export ended before a round was caught uncommitted"
        assert time.monotonic() < deadline, "no round was caught between write and commit"


@pytest.mark.parametrize("point", ["written", "round-1", "round-2"])
def test_export_killed_mid_round_and_resumed_holds_each_record_once(tmp_path, point):
    cluster = TieredCluster(tmp_path / "cluster")
    cluster.produce_and_tier(TOPIC, 4, 1500, segment_bytes=24 << 10)
    base = tmp_path / "ice"
    t = target(base)
    round_bytes = str(16 << 10)  # a round a segment: the kill lands inside the export
    cmd = [sys.executable, "-u", "-m", "engine", "export", "--config", str(cluster.config),
           "--topic", TOPIC, "--format", "iceberg", "--iceberg-catalog-uri", t.catalog_uri,
           "--iceberg-warehouse", t.warehouse, "--iceberg-table", TABLE,
           "--max-bytes-per-round", round_bytes]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, bufsize=0)  # unbuffered: select sees it all
    try:
        wait_for_kill_point(proc, base, point)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    killed = committed_state(load(base), TOPIC)
    ends = tier_ends(cluster)
    assert killed.round >= (int(point[6:]) if point.startswith("round-") else 1)
    assert killed.offsets != ends  # killed before the end
    referenced = {Path(task.file.file_path.removeprefix("file://"))
                  for task in load(base).scan().plan_files()}
    if point == "written":  # the kill left files no snapshot references
        assert data_files(base) - referenced

    export(cluster, base, "--max-bytes-per-round", round_bytes)
    table = load(base)
    got = arrow_rows(table.scan().to_arrow())
    offsets = [(r[3], r[4]) for r in got]
    assert len(offsets) == len(set(offsets))  # nothing twice
    assert got == fetched(cluster, range(4), headers=False)  # nothing lost
    assert committed_state(table, TOPIC).offsets == ends
    print(f"killed after round {killed.round} of {committed_state(table, TOPIC).round}")


def test_a_table_of_another_topic_is_refused(tmp_path):
    cluster = TieredCluster(tmp_path / "cluster")
    cluster.produce_and_tier(TOPIC, 1, 50)
    base = tmp_path / "ice"
    export(cluster, base)
    table = load(base)
    with table.transaction() as tx:  # a later snapshot of another writer, no export state
        tx.set_properties({"owner": "someone"})
    with pytest.raises(Exception, match="holds an export of topic 'exported'"):
        committed_state(table, "other")
    headers = export(cluster, base, "--include-headers", check=False)
    assert headers.returncode == 2
    assert "--include-headers must match the table's first export" in headers.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--format", "iceberg", "--iceberg-table", "a.b"],
     "--format iceberg needs --iceberg-catalog-uri"),
    (["--format", "iceberg", "--iceberg-catalog-uri", "sqlite://"],
     "--format iceberg needs --iceberg-table"),
    (["--format", "iceberg", "--iceberg-catalog-uri", "sqlite://", "--iceberg-table", "a.b",
      "--out", "o"], "--out is for --format parquet: iceberg writes to --iceberg-table"),
    (["--out", "o", "--iceberg-table", "a.b"], "--iceberg-table needs --format iceberg"),
    ([], "--format parquet needs --out DIR"),
])
def test_usage_errors_are_one_line_with_exit_2(tmp_path, args, message):
    done = subprocess.run([sys.executable, "-m", "engine", "export", "--topic", TOPIC,
                           "--bucket", "s3://b/p", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, f"error: {message}\n")
