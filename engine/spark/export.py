"""The export job: a topic's tiered history to Parquet, partitioned by partition and date,
resumable without duplicates.

Work goes in rounds of about `max_bytes_per_round` remote bytes. A round reads its offset
ranges with the `kafka-tiered` source, Spark writes them under `<out>/_staging/`, the data
files are fsynced and moved into `<out>/partition=P/date=D/` with names starting with
`round-NNNNNNNN-`, and only then the state file `<out>/_export_state.json` (the next offset
of every partition and the last round) is replaced atomically. A restart first deletes the
staging directory and every data file of a round the state does not record, then continues
from the recorded offsets: each row is written exactly once whatever point a crash hits.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from engine.common import fsync_dir, write_file_atomically
from engine.config import ConfigError
from engine.scan.export import ExportState, next_round

__all__ = ["STATE_FILE", "run_export"]

STATE_FILE = "_export_state.json"
STAGING_DIR = "_staging"
DEFAULT_MAX_BYTES_PER_ROUND = 1 << 30
_ROUND_FILE = re.compile(r"round-(\d{8})-.*\.parquet$")


def _clean(out: Path, state: ExportState) -> int:
    """Removes the staging dir and data files of unrecorded rounds. Returns files removed."""
    shutil.rmtree(out / STAGING_DIR, ignore_errors=True)
    removed = 0
    for path in out.glob("partition=*/date=*/round-*.parquet"):
        m = _ROUND_FILE.match(path.name)
        if m and int(m.group(1)) > state.round:
            path.unlink()
            removed += 1
    return removed


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(staging: Path, out: Path, round_no: int) -> int:
    """Moves the round's Parquet files into place (durably). Returns the file count."""
    moved = 0
    dirs: set[Path] = set()
    for src in sorted(staging.glob("partition=*/date=*/*.parquet")):
        _fsync_file(src)
        rel = src.relative_to(staging)
        dest_dir = out / rel.parent
        dest_dir.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest_dir / f"round-{round_no:08d}-{src.name}")
        dirs.update((dest_dir, dest_dir.parent))
        moved += 1
    for d in sorted(dirs):
        fsync_dir(d)
    fsync_dir(out)
    return moved


def run_export(spark, props: Mapping[str, str], config_path: str | None, topic: str,
               out: str | os.PathLike, *, fmt: str = "parquet",
               max_bytes_per_round: int = DEFAULT_MAX_BYTES_PER_ROUND,
               include_headers: bool = False, log=print, bucket: str | None = None,
               store: Mapping[str, str] | None = None) -> ExportState:
    """Exports every tiered record of `topic` not exported yet (from the bucket alone when
    `bucket` is given, its store's settings in `store` and/or the config's rsm.config.*).
    Returns the final state."""
    from pyspark.sql import functions as F

    if fmt != "parquet":
        raise ConfigError("--format", fmt, "only parquet is supported")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / STATE_FILE
    state = ExportState.load(state_path, topic)
    removed = _clean(out, state)
    if removed:
        log(f"removed {removed} data files of round(s) after {state.round} left by an "
            "interrupted run")
    options = {"config": config_path} if config_path else {}
    options.update({k: v for k, v in props.items() if config_path is None})
    if bucket is not None:
        options["bucket"] = bucket
        options.update(store or {})
    options["includeHeaders"] = "true" if include_headers else "false"
    while True:
        plan = next_round(props, config_path, topic, bucket, store, state.offsets,
                          max_bytes_per_round)
        if not plan:
            break
        round_no = state.round + 1
        staging = out / STAGING_DIR / f"round-{round_no:08d}"
        shutil.rmtree(staging, ignore_errors=True)
        df = (spark.read.format("kafka-tiered").options(**options)
              .option("assign", json.dumps({topic: sorted(plan)}))
              .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in
                                                              plan.items()}}))
              .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in
                                                            plan.items()}}))
              .load())
        df = df.withColumn("date", F.date_format(F.col("timestamp"), "yyyy-MM-dd"))
        df.write.mode("overwrite").partitionBy("partition", "date").parquet(str(staging))
        files = _publish(staging, out, round_no)
        state.round = round_no
        state.offsets.update({p: e for p, (_, e) in plan.items()})
        write_file_atomically(state_path, state.to_json())
        shutil.rmtree(staging, ignore_errors=True)
        log(f"round {round_no}: " + ", ".join(f"{topic}-{p} [{s}, {e})"
                                              for p, (s, e) in sorted(plan.items())) +
            f" -> {files} files")
    shutil.rmtree(out / STAGING_DIR, ignore_errors=True)
    return state


def spark_session(master: str | None = None):
    """The active session (spark-submit) or a new local one, with UTC dates."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("kafka-tiered-export")
    if master:
        builder = builder.master(master)
    spark = (builder.config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    from engine.spark import register

    register(spark)
    return spark
