"""kill -9 during tiering, then restart: the state completes and nothing is lost.

One chain of real processes over one broker (two log dirs, the filesystem tier, the
embedded RLMM, 4 KiB segments, `local.retention.bytes=1` so a segment goes locally as soon
as its copy is FINISHED). Before each launch a round of records is appended (the values
name their offsets). Kills rotate over three kinds (seeded):

- `time`: `python -m engine run --until-idle` killed with SIGKILL after a random delay
  (start-up, recovery, copies, metadata writes, local deletes: wherever it is);
- `meta`: tests/tiered_crash_driver.py kills itself half way through writing its K-th
  remote-metadata event (a torn frame in the RLMM's log);
- `copy`: the driver kills itself half way through copying its K-th file to the tier.

K is drawn from the writes the launch will make: the closed local segments not copied yet
(counted on disk before the launch) times the events (2) or files (3) per copied segment.

After every kill, read offline (the process is dead, nothing is repaired first):
no local segment is gone unless FINISHED remote segments cover every offset below the
first local segment, no two FINISHED segments overlap, and every FINISHED segment's data
reads back with its stored checksums. At the end one uninterrupted run must finish
(exit 0) and every offset must read back through the RLM with its value.

ENGINE_TIERED_CRASH_KILLS=N (default 16) sets the number of kills, e.g. 200 for a long
run (about 1.5 s per kill on 2 CPUs); ENGINE_TIERED_CRASH_SEED picks the sequence.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from broker_support import FS_TIERED, broker_template
from suite_counts import count_at_least

from engine.cli._broker import open_broker
from engine.cli.fetch import ConsumerView
from engine.common import Uuid
from engine.config import load_broker_config
from engine.log.checkpoint import PartitionMetadataFile
from engine.log.log_manager import LogManager
from engine.records import RecordBatchBuilder
from engine.remote.embedded_rlmm import METADATA_DIR_NAME, EmbeddedRemoteLogMetadataManager
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.metadata import RemoteLogSegmentState

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "tests", "tiered_crash_driver.py")
KILLS = count_at_least("ENGINE_TIERED_CRASH_KILLS", 16)
SEED = int(os.environ.get("ENGINE_TIERED_CRASH_SEED", "405"))
TOPIC = "crash"
PARTITIONS = 2
BATCHES_PER_ROUND = 24  # about 11 KiB: 2-3 segments of 4 KiB per partition and round

PROPERTIES = broker_template(FS_TIERED)


def value_of(partition: int, offset: int) -> bytes:
    return b"%d-%d-" % (partition, offset) + b"x" * 60


def _produce_round(dirs, path) -> dict[int, int]:
    """Appends a round to every partition (opening the logs recovers them after a kill).
    Returns the log end offsets."""
    broker = load_broker_config(path)
    ends = {}
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        for p in range(PARTITIONS):
            unified = manager.get_log(TOPIC, p)
            if unified is None:
                unified = manager.get_or_create_log(TOPIC, p, topic_id=_topic_id(dirs))
            for _ in range(BATCHES_PER_ROUND):
                base = unified.log_end_offset
                builder = RecordBatchBuilder()
                for i in range(5):
                    builder.append(value_of(p, base + i), key=None, timestamp=1_600_000_000_000)
                manager.append_as_leader(TOPIC, p, builder.build(), 0)
            ends[p] = unified.log_end_offset
    return ends


_TOPIC_ID = {}


def _topic_id(dirs):
    return _TOPIC_ID.setdefault(str(dirs["d1"]), Uuid.random())


def _partition_dir(dirs, p):
    for d in ("d1", "d2"):
        candidate = dirs[d] / f"{TOPIC}-{p}"
        if candidate.is_dir():
            return candidate
    raise AssertionError(f"no directory for {TOPIC}-{p}")


def _check_offline(dirs, ends) -> int:
    """The invariants, read from the files of a dead process. Returns FINISHED count."""
    rlmm = EmbeddedRemoteLogMetadataManager.open_read_only(dirs["d1"] / METADATA_DIR_NAME)
    rsm = FileSystemRemoteStorageManager([str(dirs["tier"])])
    total = 0
    try:
        tips = {tip.partition: tip for tip in rlmm.list_partitions() if tip.topic == TOPIC}
        for p in range(PARTITIONS):
            pdir = _partition_dir(dirs, p)
            topic_id = PartitionMetadataFile(pdir / "partition.metadata").read().topic_id
            bases = sorted(int(n[:-4]) for n in os.listdir(pdir)
                           if n.endswith(".log") and n[:-4].isdigit())
            assert bases, f"{pdir}: no local segment at all"
            finished = []
            if p in tips:
                assert tips[p].topic_id == topic_id
                finished = sorted((md for md in rlmm.list_remote_log_segments(tips[p])
                                   if md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
                                  key=lambda md: md.start_offset)
            covered = 0
            for prev, md in zip([None, *finished], finished):
                assert prev is None or md.start_offset > prev.end_offset, (
                    f"{TOPIC}-{p}: FINISHED segments overlap: {prev} and {md}")
                if md.start_offset <= covered:
                    covered = max(covered, md.end_offset + 1)
                data = rsm.read_range(md, 0, md.segment_size_in_bytes)
                assert len(data) == md.segment_size_in_bytes
            assert covered >= bases[0], (
                f"{TOPIC}-{p}: local segments start at {bases[0]} but FINISHED remote "
                f"segments cover only [0, {covered}): a local segment went without its copy")
            total += len(finished)
    finally:
        rlmm.close()
        rsm.close()
    return total


def _pending_segments(dirs) -> int:
    """Closed local segments of every partition (local.retention.bytes=1 deletes a copied
    one at once, so these are the copies to come, give or take one not deleted yet)."""
    pending = 0
    for p in range(PARTITIONS):
        names = os.listdir(_partition_dir(dirs, p))
        pending += max(0, sum(1 for n in names if n.endswith(".log") and n[:-4].isdigit()) - 1)
    return pending


def _launch(kind, path, rng, pending_segments):
    if kind == "time":
        proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--config", path,
                                 "--until-idle"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.25, 1.2))
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    else:
        writes = 2 * pending_segments if kind == "meta" else 3 * pending_segments
        k = rng.randint(1, max(1, writes))
        proc = subprocess.Popen([sys.executable, DRIVER, path, kind, str(k)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode(errors="replace")


def test_kill_nine_during_copy_and_metadata_writes_then_restart(tmp_path):
    dirs = {k: tmp_path / k for k in ("d1", "d2", "tier")}
    for d in dirs.values():
        d.mkdir()
    path = str(tmp_path / "server.properties")
    with open(path, "w") as f:
        f.write(PROPERTIES.format(**dirs))
    rng = random.Random(SEED)
    kinds = ["time", "meta", "copy"]
    kills, launches, finished_runs = 0, 0, 0
    ends = {}
    while kills < KILLS:
        assert launches < 3 * KILLS + 10, f"only {kills} kills in {launches} launches"
        ends = _produce_round(dirs, path)
        kind = kinds[launches % 3]
        launches += 1
        code, err = _launch(kind, path, rng, pending_segments=_pending_segments(dirs))
        if code == -signal.SIGKILL:
            kills += 1
            print(f"kill {kills}: {kind}; {_check_offline(dirs, ends)} FINISHED so far")
        else:
            assert code == 0, f"run ({kind}) failed with {code}: {err}"
            finished_runs += 1
        _check_offline(dirs, ends)

    print(f"{kills} kills in {launches} launches ({finished_runs} ran to the end)")
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "--config", path,
                           "--until-idle"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    tiered = _check_offline(dirs, ends)
    assert tiered >= PARTITIONS * 5
    with open_broker(path) as session:
        rlm = session.remote_log_manager()
        for p in range(PARTITIONS):
            unified = session.log(TOPIC, p)
            assert unified.log_start_offset == 0 and unified.log_end_offset == ends[p]
            assert unified.local_log_start_offset > 0
            view = ConsumerView(0, ends[p])
            seen = 0
            while view.position < ends[p]:
                result = rlm.read(TOPIC, p, view.position, 64 << 10)
                for _, record in view.records(result.records):
                    assert record.offset == seen and record.value == value_of(p, seen)
                    seen += 1
            assert seen == ends[p]
        rows = {r["partition"]: r for r in rlm.status()}
        assert all(rows[p]["copy_lag_segments"] == 0 for p in range(PARTITIONS)), rows
