"""`python -m engine export`: a topic's tiered history to Parquet by partition and date,
killed half way (SIGKILL to the driver and its JVM) and resumed with spark-submit: every
record is in the output exactly once."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as pads
import pytest
from spark_support import REPO, TieredCluster, arrow_rows, fetch_row, require_java, spark_env

from engine.scan.export import ExportState, plan_round
from engine.spark.export import STATE_FILE, _clean

TOPIC = "exported"


def export_cmd(cluster, out, round_bytes, *, submit=False):
    args = ["--config", str(cluster.config), "--topic", TOPIC, "--out", str(out),
            "--max-bytes-per-round", str(round_bytes)]
    if submit:
        spark_submit = Path(sys.executable).parent / "spark-submit"
        return [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                str(REPO / "engine" / "cli" / "export.py"), *args]
    return [sys.executable, "-m", "engine", "export", "--master", "local[2]", *args]


def state_round(out: Path) -> int:
    try:
        return json.loads((out / STATE_FILE).read_text())["round"]
    except (FileNotFoundError, ValueError):
        return 0


def test_export_killed_and_resumed_writes_each_row_once(tmp_path):
    require_java()
    cluster = TieredCluster(tmp_path / "cluster")
    cluster.produce_and_tier(TOPIC, 2, 1200, segment_bytes=32 << 10)
    out = tmp_path / "out"
    env = {**os.environ, **spark_env()}
    tiered = sum(f.stat().st_size for f in cluster.tier_dir.rglob("*.log"))
    round_bytes = tiered // 3 + 1  # three rounds: killed in the second, resumed for the rest

    first = subprocess.Popen(export_cmd(cluster, out, round_bytes), cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    deadline = time.monotonic() + 180
    while state_round(out) < 1:
        assert first.poll() is None, first.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the export committed no round"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)  # the driver and the JVM it started, mid-round
    first.wait()
    killed_at = state_round(out)

    assert killed_at < 3
    second = subprocess.run(export_cmd(cluster, out, round_bytes, submit=True), cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    state = ExportState.load(out / STATE_FILE, TOPIC)
    assert state.round > killed_at  # the resumed run did the rest
    assert not (out / "_staging").exists()

    files = sorted(map(str, out.glob("partition=*/date=*/*.parquet")))
    table = pads.dataset(files, format="parquet", partitioning="hive",
                         partition_base_dir=str(out)).to_table()
    offsets = list(zip(table.column("partition").to_pylist(),
                       table.column("offset").to_pylist()))
    assert len(offsets) == len(set(offsets))  # nothing written twice
    want = []
    for p in range(2):
        want += [fetch_row(TOPIC, p, r, headers=False) for r in cluster.fetch(TOPIC, p, 0)]
    from engine.scan.planning import tier_bounds
    from engine.scan.tier import Tier

    with Tier(cluster.props) as tier:
        ends = {p: tier_bounds(tier.chain(tip))[1]
                for (t, p), tip in tier.partitions().items() if t == TOPIC}
    assert state.offsets == ends  # the state says: everything tiered is exported
    got = arrow_rows(table.drop_columns(["date"]))
    assert got == sorted(want, key=lambda r: (r[3], r[4]))  # nothing lost
    dates = {str(d) for d in table.column("date").to_pylist()}
    assert dates == {"2023-11-14"} and all(
        p.name.startswith("round-") for p in out.glob("partition=*/date=*/*.parquet"))


def test_restart_removes_files_of_unrecorded_rounds(tmp_path):
    out = tmp_path / "out"
    (out / "partition=0" / "date=2023-11-14").mkdir(parents=True)
    (out / "_staging" / "round-00000003").mkdir(parents=True)
    kept = out / "partition=0" / "date=2023-11-14" / "round-00000002-part-0.parquet"
    lost = out / "partition=0" / "date=2023-11-14" / "round-00000003-part-0.parquet"
    kept.write_bytes(b"x")
    lost.write_bytes(b"x")
    assert _clean(out, ExportState(TOPIC, 2, {0: 100})) == 1
    assert kept.exists() and not lost.exists() and not (out / "_staging").exists()


def test_rounds_take_whole_segments_and_refuse_a_gap():
    from test_spark_planning import seg

    from engine.errors import OffsetOutOfRangeError
    from engine.scan.planning import lineage

    chain = lineage([seg(0, 99, {0: 0}, size=100), seg(100, 199, {0: 100}, size=100),
                     seg(200, 299, {0: 200}, size=100)])
    assert plan_round({0: chain}, {}, 150) == {0: (0, 200)}
    assert plan_round({0: chain, 1: chain}, {0: 200}, 150) == {0: (200, 300), 1: (0, 100)}
    assert plan_round({0: chain}, {0: 300}, 150) == {}
    with pytest.raises(OffsetOutOfRangeError, match="retention deleted records"):
        plan_round({0: chain[1:]}, {0: 50}, 150)


def test_bad_arguments_fail_before_spark_starts(tmp_path):
    cluster = TieredCluster(tmp_path / "cluster")
    cluster.produce_and_tier(TOPIC, 1, 50)
    env = {**os.environ, **spark_env()}

    def export(*args):
        return subprocess.run([sys.executable, "-m", "engine", "export", *args], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=120)

    missing = export("--config", str(tmp_path / "nope.properties"), "--topic", TOPIC,
                     "--out", str(tmp_path / "o"))
    assert missing.returncode == 2 and "nope.properties: file not found" in missing.stderr
    unknown = export("--config", str(cluster.config), "--topic", "other", "--out",
                     str(tmp_path / "o"))
    assert unknown.returncode == 2
    assert f"unknown topic 'other': the remote tier holds ['{TOPIC}']" in unknown.stderr
    (tmp_path / "o").mkdir(exist_ok=True)
    (tmp_path / "o" / STATE_FILE).write_text('{"topic": "another", "round": 1, "offsets": {}}')
    clash = export("--config", str(cluster.config), "--topic", TOPIC, "--out",
                   str(tmp_path / "o"))
    assert clash.returncode == 2 and "holds an export of topic 'another'" in clash.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--bucket", "s3://b/p", "--store", "a=b", "--store", "x"],
     "--store (its argument number 2 of 2): expected KEY=VALUE"),
    (["--bucket", "s3://b/p", "--max-bytes-per-round", "0"],
     "--max-bytes-per-round must be at least 1"),
    ([], "give --config FILE (the broker's tier) or --bucket URL"),
    (["--config", "c.properties", "--store", "a=b"], "--store needs --bucket"),
])
def test_usage_errors_are_one_line_with_exit_2(tmp_path, args, message):
    done = subprocess.run([sys.executable, "-m", "engine", "export", "--topic", TOPIC,
                           "--out", str(tmp_path / "o"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, f"error: {message}\n")
    assert not (tmp_path / "o").exists()
