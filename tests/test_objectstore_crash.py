"""kill -9 during tiering to the object-store tier (a real S3 server), then restart: nothing
is lost and nothing is left behind.

One chain of real processes over one broker (two log dirs, the object-store tier on
SeaweedFS with zstd chunks, the embedded RLMM, 4 KiB segments, `local.retention.bytes=1`).
Before each launch a round of records is appended (the values name their offsets). Kills
rotate over three kinds (seeded):

- `time`: `python -m engine run --until-idle` killed with SIGKILL after a random delay;
- `upload`: tests/objectstore_crash_driver.py kills itself half way through streaming its
  K-th object (`.log`, `.indexes` or manifest) to the store;
- `delete`: the driver kills itself at its first batched delete of a segment's objects (the
  cleanup of the copy the `upload` kill before it interrupted).

The test fails unless every kind landed at least once.

After every kill, read offline: no two FINISHED segments overlap, every FINISHED segment has
its three objects and its `.log` reads back with every batch CRC valid and its offsets
exactly, and no local segment is gone unless FINISHED segments cover every offset below the
first local one. At the end one uninterrupted run must finish, the bucket must hold exactly
the objects of the FINISHED segments (orphans of interrupted copies deleted), and every
offset must read back through the RLM with its value.

ENGINE_OBJECTSTORE_CRASH_KILLS=N (default 30) sets the number of kills (about 4 s each on a
loaded 2-CPU machine);
ENGINE_OBJECTSTORE_CRASH_SEED picks the sequence.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid

import obstore
from broker_support import FS_TIERED, broker_properties
from suite_counts import count_at_least

from engine.cli._broker import open_broker
from engine.cli.fetch import ConsumerView
from engine.common import Uuid
from engine.config import load_broker_config
from engine.log.log_manager import LogManager
from engine.records import RecordBatchBuilder, scan_batches
from engine.remote.embedded_rlmm import METADATA_DIR_NAME, EmbeddedRemoteLogMetadataManager
from engine.remote.metadata import RemoteLogSegmentState
from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "tests", "objectstore_crash_driver.py")
KILLS = count_at_least("ENGINE_OBJECTSTORE_CRASH_KILLS", 30)
SEED = int(os.environ.get("ENGINE_OBJECTSTORE_CRASH_SEED", "917"))
TOPIC = "crash"
PARTITIONS = 2
BATCHES_PER_ROUND = 24
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def value_of(partition: int, offset: int) -> bytes:
    return b"%d-%d-" % (partition, offset) + b"x" * 60


def _rsm_configs(s3_server, prefix: str) -> dict[str, str]:
    return {**s3_server.config(), "key.prefix": prefix, "chunk.size": "1024",
            "compression.enabled": "true", "storage.api.call.max.retries": "1"}


def _write_properties(path, dirs, rsm_configs) -> None:
    rsm = {"remote.log.storage.manager.class.name":
           "engine.remote.ObjectStorageRemoteStorageManager",
           **{f"rsm.config.{k}": v for k, v in rsm_configs.items()}}
    with open(path, "w") as f:
        f.write(broker_properties(dirs, FS_TIERED, rsm))


def _produce_round(path, topic_id) -> dict[int, int]:
    broker = load_broker_config(path)
    ends = {}
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        for p in range(PARTITIONS):
            unified = manager.get_log(TOPIC, p)
            if unified is None:
                unified = manager.get_or_create_log(TOPIC, p, topic_id=topic_id)
            for _ in range(BATCHES_PER_ROUND):
                base = unified.log_end_offset
                builder = RecordBatchBuilder()
                for i in range(5):
                    builder.append(value_of(p, base + i), timestamp=1_600_000_000_000)
                manager.append_as_leader(TOPIC, p, builder.build(), 0)
            ends[p] = unified.log_end_offset
    return ends


def _local_bases(dirs, p) -> list[int]:
    for d in ("d1", "d2"):
        pdir = dirs[d] / f"{TOPIC}-{p}"
        if pdir.is_dir():
            return sorted(int(n[:-4]) for n in os.listdir(pdir)
                          if n.endswith(".log") and n[:-4].isdigit())
    raise AssertionError(f"no directory for {TOPIC}-{p}")


def _objects(s3_server, prefix) -> set[str]:
    return {m["path"] for page in obstore.list(s3_server.raw_store(), prefix=prefix)
            for m in page}


def _check_offline(dirs, s3_server, rsm_configs) -> list:
    """The invariants, read from a dead process's files and the bucket. Returns the
    FINISHED segments."""
    prefix = rsm_configs["key.prefix"]
    objects = _objects(s3_server, prefix)
    rlmm = EmbeddedRemoteLogMetadataManager.open_read_only(dirs["d1"] / METADATA_DIR_NAME)
    rsm = ObjectStorageRemoteStorageManager()
    rsm.configure(rsm_configs)
    all_finished = []
    try:
        tips = {tip.partition: tip for tip in rlmm.list_partitions() if tip.topic == TOPIC}
        for p in range(PARTITIONS):
            bases = _local_bases(dirs, p)
            assert bases, f"{TOPIC}-{p}: no local segment at all"
            finished = sorted((md for md in rlmm.list_remote_log_segments(tips[p])
                               if md.state is FINISHED), key=lambda md: md.start_offset) \
                if p in tips else []
            covered = 0
            for prev, md in zip([None, *finished], finished):
                assert prev is None or md.start_offset > prev.end_offset, (prev, md)
                keys = {rsm.keys.key(md, s) for s in ("log", "indexes", "rsm-manifest")}
                assert keys <= objects, f"FINISHED {md} lacks {sorted(keys - objects)}"
                data = rsm.read_range(md, 0, md.segment_size_in_bytes)
                headers = scan_batches(data, verify_crc=True).headers
                assert headers["crc_valid"].all()
                assert headers["base_offset"][0] == md.start_offset
                assert headers["last_offset"][-1] == md.end_offset
                if md.start_offset <= covered:
                    covered = max(covered, md.end_offset + 1)
            assert covered >= bases[0], (
                f"{TOPIC}-{p}: local segments start at {bases[0]} but FINISHED remote "
                f"segments cover only [0, {covered})")
            all_finished += finished
    finally:
        rlmm.close()
        rsm.close()
    return all_finished


def _launch(kind, path, rng, pending):
    if kind == "time":
        proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--config", path,
                                 "--until-idle"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.3, 1.5))
        proc.send_signal(signal.SIGKILL)
    else:
        # a delete launch follows an upload kill, whose interrupted copy its cleanup deletes
        # first: its first delete is the one sure to come
        k = rng.randint(1, max(1, 3 * pending)) if kind == "upload" else 1
        proc = subprocess.Popen([sys.executable, DRIVER, path, kind, str(k)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=180)
    return proc.returncode, err.decode(errors="replace")


def test_kill_nine_during_uploads_and_deletes_then_restart(tmp_path, s3_server):
    dirs = {k: tmp_path / k for k in ("d1", "d2")}
    for d in dirs.values():
        d.mkdir()
    path = str(tmp_path / "server.properties")
    rsm_configs = _rsm_configs(s3_server, f"crash-{uuid.uuid4().hex[:8]}/")
    _write_properties(path, dirs, rsm_configs)
    topic_id = Uuid.random()
    rng = random.Random(SEED)
    kinds = ["upload", "delete", "time"]
    kills, launches = 0, 0
    landed = dict.fromkeys(kinds, 0)
    ends = {}
    while kills < KILLS:
        assert launches < 4 * KILLS + 10, f"only {kills} kills in {launches} launches"
        ends = _produce_round(path, topic_id)
        kind = kinds[launches % 3]
        launches += 1
        pending = sum(max(0, len(_local_bases(dirs, p)) - 1) for p in range(PARTITIONS))
        code, err = _launch(kind, path, rng, pending)
        if code == -signal.SIGKILL:
            kills += 1
            landed[kind] += 1
            print(f"kill {kills}: {kind}; {len(_check_offline(dirs, s3_server, rsm_configs))}"
                  " FINISHED so far")
        else:
            assert code == 0, f"run ({kind}) failed with {code}: {err}"
            _check_offline(dirs, s3_server, rsm_configs)

    # each kind must have landed: a kill mid-delete is what proves the cleanup idempotent
    assert all(n > 0 for n in landed.values()), landed
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "--config", path,
                           "--until-idle"], check=False, cwd=ROOT, capture_output=True,
                          text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    finished = _check_offline(dirs, s3_server, rsm_configs)
    assert len(finished) >= PARTITIONS * 5
    rsm = ObjectStorageRemoteStorageManager()
    rsm.configure(rsm_configs)
    try:
        expected = {rsm.keys.key(md, s) for md in finished
                    for s in ("log", "indexes", "rsm-manifest")}
    finally:
        rsm.close()
    assert _objects(s3_server, rsm_configs["key.prefix"]) == expected  # no orphans
    with open_broker(path) as session:
        rlm = session.remote_log_manager()
        for p in range(PARTITIONS):
            unified = session.log(TOPIC, p)
            assert unified.log_start_offset == 0 and unified.log_end_offset == ends[p]
            assert unified.local_log_start_offset > 0
            view = ConsumerView(0, ends[p])
            seen = 0
            while view.position < ends[p]:
                before = view.position
                result = rlm.read(TOPIC, p, view.position, 64 << 10)
                for _, record in view.records(result.records):
                    assert record.offset == seen and record.value == value_of(p, seen)
                    seen += 1
                assert view.position > before, f"no progress at {before}"
            assert seen == ends[p]
