"""EmbeddedRemoteLogMetadataManager: durability, torn tails, corruption, snapshots, readers,
threads, and a writer process killed with SIGKILL.

Longer crash run:

    RLMM_CRASH_KILLS=200 RLMM_CRASH_SEED=5 /work/venv/bin/python -m pytest -q \\
        tests/test_rlmm.py -k sigkill
"""

import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from suite_counts import count_at_least

from engine.common import Uuid
from engine.config import ConfigError
from engine.errors import (
    CorruptRemoteLogMetadataError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from engine.remote import metadata_log
from engine.remote.embedded_rlmm import METADATA_DIR_NAME, EmbeddedRemoteLogMetadataManager
from engine.remote.metadata import (
    IllegalStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
D = RemotePartitionDeleteState
ROOT = Path(__file__).resolve().parent.parent
WRITER = ROOT / "tests" / "rlmm_crash_writer.py"
TIP = TopicIdPartition(Uuid.random(), "orders", 0)
TIP2 = TopicIdPartition(Uuid.random(), "orders", 1)


def seg(start, end, epochs, tip=TIP, custom=None):
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, end,
                                    1_700_000_000_000 + end, 0, 1, 4096, epochs, custom)


def upd(md, state, custom=None):
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, custom, state, 1)


def open_rlmm(path, **kw):
    return EmbeddedRemoteLogMetadataManager(path, **kw)


def state_of(rlmm, tip=TIP, epochs=range(5), offsets=range(0, 700, 11)):
    return (list(rlmm.list_remote_log_segments(tip)),
            {e: list(rlmm.list_remote_log_segments(tip, e)) for e in epochs},
            {e: rlmm.highest_offset_for_epoch(tip, e) for e in epochs},
            {(e, o): rlmm.remote_log_segment_metadata(tip, e, o) for e in epochs for o in offsets},
            rlmm.partition_delete_state(tip))


def fill(rlmm, tip=TIP, n=6):
    """n segments of 100 offsets over epochs 0..2, various states."""
    made = []
    for i in range(n):
        md = seg(i * 100, i * 100 + 99, {i // 2: i * 100, i // 2 + 1: i * 100 + 60}, tip,
                 custom=b"c%d" % i if i % 2 else None)
        rlmm.add_remote_log_segment_metadata(md)
        if i != n - 1:
            rlmm.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED, b"rsm"))
        made.append(md)
    rlmm.update_remote_log_segment_metadata(upd(made[0], S.DELETE_SEGMENT_STARTED))
    rlmm.update_remote_log_segment_metadata(upd(made[0], S.DELETE_SEGMENT_FINISHED))
    rlmm.update_remote_log_segment_metadata(upd(made[1], S.DELETE_SEGMENT_STARTED))
    return made


def log_files(directory):
    return sorted(Path(directory).glob("*/*.log"))


# ---- configuration ----------------------------------------------------------------------

def test_configure_uses_the_first_log_dir(tmp_path):
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(tmp_path), "broker.id": "3",
                    "snapshot.interval.entries": "50", "unrelated.key": "x"})
    assert rlmm.metadata_dir == tmp_path / METADATA_DIR_NAME
    assert rlmm.broker_id == 3 and rlmm.snapshot_interval_entries == 50
    rlmm.add_remote_log_segment_metadata(seg(0, 9, {0: 0}))
    assert (tmp_path / METADATA_DIR_NAME / f"orders-0-{TIP.topic_id}").is_dir()
    rlmm.close()
    other = EmbeddedRemoteLogMetadataManager()
    other.configure({"log.dir": str(tmp_path), "metadata.dir": str(tmp_path / "elsewhere")})
    assert other.metadata_dir == tmp_path / "elsewhere"
    other.close()


@pytest.mark.parametrize("configs", [
    {"log.dir": "LOG", "broker.id": "x"},
    {"log.dir": "LOG", "broker.id": "-2"},
    {"log.dir": "LOG", "snapshot.interval.entries": "0"},
    {"log.dir": "LOG", "snapshot.interval.entries": "1.5"},
    {"log.dir": "LOG", "snapshot.interval.entries": str(2**31)},
    {"log.dir": ""},
    {"broker.id": "1"},
])
def test_configure_refuses_bad_values(tmp_path, configs):
    configs = {k: v.replace("LOG", str(tmp_path)) for k, v in configs.items()}
    rlmm = EmbeddedRemoteLogMetadataManager()
    with pytest.raises(ConfigError) as info:
        rlmm.configure(configs)
    assert info.value.key in configs or info.value.key == "log.dir"
    rlmm.close()


def test_unconfigured_and_closed_managers_refuse_calls(tmp_path):
    rlmm = EmbeddedRemoteLogMetadataManager()
    with pytest.raises(RemoteStorageError, match="not configured"):
        rlmm.highest_offset_for_epoch(TIP, 0)
    rlmm = open_rlmm(tmp_path)
    rlmm.close()
    rlmm.close()
    with pytest.raises(RemoteStorageError, match="closed"):
        rlmm.add_remote_log_segment_metadata(seg(0, 9, {0: 0}))


def test_one_writer_per_directory(tmp_path):
    with open_rlmm(tmp_path):
        with pytest.raises(RemoteStorageError, match="another writer"):
            open_rlmm(tmp_path)
        second = EmbeddedRemoteLogMetadataManager()
        with pytest.raises(RemoteStorageError, match="another writer"):
            second.configure({"metadata.dir": str(tmp_path)})
        with pytest.raises(RemoteStorageError, match="not configured"):
            second.add_remote_log_segment_metadata(seg(0, 9, {0: 0}))
        reader = EmbeddedRemoteLogMetadataManager.open_read_only(tmp_path)  # readers may
        reader.close()
    open_rlmm(tmp_path).close()   # the lock went with the first writer


# ---- durability -------------------------------------------------------------------------

def test_events_survive_a_restart_and_load_lazily(tmp_path):
    with open_rlmm(tmp_path) as rlmm:
        fill(rlmm)
        fill(rlmm, TIP2, n=3)
        rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
            TIP2, D.DELETE_PARTITION_MARKED, 5, 0))
        before = state_of(rlmm), state_of(rlmm, TIP2)
        assert len(before[0][0]) == 5 and before[0][2][0] == 159
    with open_rlmm(tmp_path) as again:        # no leadership call: loads on first use
        assert (state_of(again), state_of(again, TIP2)) == before
        assert again.list_partitions() == [TIP, TIP2]
        assert again.partition_delete_state(TIP2) == D.DELETE_PARTITION_MARKED
        assert again.partition_delete_state(TIP) is None


def test_unknown_partition_answers_empty_without_creating_files(tmp_path):
    with open_rlmm(tmp_path) as rlmm:
        assert list(rlmm.list_remote_log_segments(TIP)) == []
        assert rlmm.highest_offset_for_epoch(TIP, 0) is None
        assert rlmm.is_ready(TIP)
        rlmm.on_partition_leadership_changes([TIP], [TIP2])
        assert rlmm.list_partitions() == []
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]


def test_refused_events_are_not_stored(tmp_path):
    with open_rlmm(tmp_path) as rlmm:
        made = fill(rlmm)
        size = log_files(tmp_path)[0].stat().st_size
        before = state_of(rlmm)
        with pytest.raises(IllegalStateTransitionError):
            rlmm.update_remote_log_segment_metadata(upd(made[2], S.DELETE_SEGMENT_FINISHED))
        with pytest.raises(IllegalStateTransitionError):
            rlmm.add_remote_log_segment_metadata(made[3])
        with pytest.raises(RemoteResourceNotFoundError):
            rlmm.update_remote_log_segment_metadata(upd(made[0], S.DELETE_SEGMENT_STARTED))
        with pytest.raises(IllegalStateTransitionError):
            rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
                TIP, D.DELETE_PARTITION_STARTED, 1, 0))
        assert state_of(rlmm) == before
        assert log_files(tmp_path)[0].stat().st_size == size
    with open_rlmm(tmp_path) as again:
        assert state_of(again) == before


def test_partition_deletion_lifecycle_is_durable(tmp_path):
    with open_rlmm(tmp_path) as rlmm:
        made = fill(rlmm)
        for state in D:
            rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
                TIP, state, 10 + state, 0))
            assert rlmm.partition_delete_state(TIP) == state
        assert list(rlmm.list_remote_log_segments(TIP)) == []
        with pytest.raises(IllegalStateTransitionError):
            rlmm.add_remote_log_segment_metadata(seg(900, 999, {5: 900}))
        with pytest.raises(RemoteResourceNotFoundError):
            rlmm.update_remote_log_segment_metadata(upd(made[2], S.DELETE_SEGMENT_STARTED))
    with open_rlmm(tmp_path) as again:
        assert again.partition_delete_state(TIP) == D.DELETE_PARTITION_FINISHED
        assert list(again.list_remote_log_segments(TIP)) == []
        assert again.list_partitions() == [TIP]


def test_stop_partitions_unloads_and_reloads(tmp_path):
    with open_rlmm(tmp_path) as rlmm:
        fill(rlmm)
        before = state_of(rlmm)
        rlmm.on_stop_partitions([TIP])
        assert state_of(rlmm) == before
        rlmm.add_remote_log_segment_metadata(seg(600, 650, {3: 600}))
    with open_rlmm(tmp_path) as again:
        assert len(list(again.list_remote_log_segments(TIP))) == len(before[0]) + 1


# ---- torn tails and corruption ----------------------------------------------------------

def _write_events(directory, sizes):
    """Writes events, recording the live log's size after each; returns the states seen
    after each event."""
    states = []
    with open_rlmm(directory, snapshot_interval_entries=10_000) as rlmm:
        rlmm.on_partition_leadership_changes([TIP], [])
        sizes.append(0)
        fill(rlmm, n=4)
        states.append(state_of(rlmm))
        sizes.append(log_files(directory)[0].stat().st_size)
        last = seg(500, 599, {4: 500}, custom=b"last entry")
        rlmm.add_remote_log_segment_metadata(last)
        states.append(state_of(rlmm))
        sizes.append(log_files(directory)[0].stat().st_size)
    return states


def test_torn_tail_is_dropped_at_every_cut_of_the_last_entry(tmp_path, caplog):
    sizes = []
    states = _write_events(tmp_path / "orig", sizes)
    (log_file,) = log_files(tmp_path / "orig")
    data = log_file.read_bytes()
    entry_start, entry_end = sizes[-2], sizes[-1]
    assert entry_end == len(data) and entry_end - entry_start > 60
    for cut in range(entry_start, entry_end):
        work = tmp_path / f"cut{cut}"
        shutil.copytree(tmp_path / "orig", work)
        torn = work / log_file.relative_to(tmp_path / "orig")
        torn.write_bytes(data[:cut])
        reader = EmbeddedRemoteLogMetadataManager.open_read_only(work)
        assert state_of(reader) == states[0]           # the reader never truncates
        assert torn.stat().st_size == cut
        reader.close()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=metadata_log.__name__), \
                open_rlmm(work) as rlmm:
            assert state_of(rlmm) == states[0]
            assert torn.stat().st_size == entry_start
            if cut > entry_start:
                assert f"{cut - entry_start} bytes from position {entry_start}" in caplog.text
            rlmm.add_remote_log_segment_metadata(seg(700, 701, {4: 700}))
        with open_rlmm(work) as again:
            assert len(list(again.list_remote_log_segments(TIP))) == len(states[0][0]) + 1
        shutil.rmtree(work)


def test_zero_filled_tail_is_dropped(tmp_path):
    sizes = []
    states = _write_events(tmp_path, sizes)
    (log_file,) = log_files(tmp_path)
    with open(log_file, "ab") as f:
        f.write(b"\0" * 4096)                 # the file grew but the data never landed
    with open_rlmm(tmp_path) as rlmm:
        assert state_of(rlmm) == states[1]
    assert log_file.stat().st_size == sizes[-1]


def test_bit_flip_in_a_middle_entry_is_a_typed_error(tmp_path):
    sizes = []
    _write_events(tmp_path / "orig", sizes)
    (log_file,) = log_files(tmp_path / "orig")
    data = log_file.read_bytes()
    frames, _ = metadata_log.decode_frames(data, log_file)
    start, body = frames[3]                    # an entry with entries after it
    end = start + metadata_log.HEADER_SIZE + len(body)
    work = tmp_path / "work"
    shutil.copytree(tmp_path / "orig", work)
    bad = work / log_file.relative_to(tmp_path / "orig")
    for pos in range(start, end):
        for bit in (0, 7):
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            bad.write_bytes(flipped)
            for read_only in (False, True):
                opener = (EmbeddedRemoteLogMetadataManager.open_read_only if read_only
                          else EmbeddedRemoteLogMetadataManager)
                with opener(work) as rlmm, pytest.raises(CorruptRemoteLogMetadataError) as info:
                    rlmm.highest_offset_for_epoch(TIP, 0)
                assert info.value.file == str(bad) and info.value.position == start, pos
                assert bad.read_bytes() == flipped        # nothing was cut away


def test_bit_flip_in_the_last_entry_drops_it_as_a_damaged_tail(tmp_path, caplog):
    sizes = []
    states = _write_events(tmp_path, sizes)
    (log_file,) = log_files(tmp_path)
    data = bytearray(log_file.read_bytes())
    data[-3] ^= 0x10
    log_file.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger=metadata_log.__name__), \
            open_rlmm(tmp_path) as rlmm:
        assert state_of(rlmm) == states[0]
    assert "body checksum mismatch" in caplog.text


def test_checksummed_but_unknown_version_is_an_error(tmp_path):
    sizes = []
    _write_events(tmp_path, sizes)
    (log_file,) = log_files(tmp_path)
    body = bytearray(metadata_log.encode_event(seg(0, 1, {0: 0})))
    body[0] = 99
    with open(log_file, "ab") as f:
        f.write(metadata_log.encode_frame(bytes(body)))
    with pytest.raises(CorruptRemoteLogMetadataError, match="format version 99") as info:
        open_rlmm_and_read(tmp_path)
    assert info.value.position == sizes[-1]


def open_rlmm_and_read(path):
    with EmbeddedRemoteLogMetadataManager(path) as rlmm:
        return rlmm.highest_offset_for_epoch(TIP, 0)


def test_file_of_another_partition_is_an_error(tmp_path):
    with open_rlmm(tmp_path) as rlmm:
        fill(rlmm, TIP2, n=2)
    src = next(tmp_path.glob("orders-1-*"))
    src.rename(tmp_path / metadata_log.partition_dir_name(TIP))
    with pytest.raises(CorruptRemoteLogMetadataError, match="belongs to partition"):
        open_rlmm_and_read(tmp_path)


# ---- snapshots --------------------------------------------------------------------------

def test_snapshot_compaction_and_restart(tmp_path):
    with open_rlmm(tmp_path, snapshot_interval_entries=5) as rlmm:
        made = fill(rlmm, n=8)                      # 8 adds, 7 finishes, 3 deletes: 18
        before = state_of(rlmm)
        pdir = next(tmp_path.glob("orders-0-*"))
        names = sorted(p.name for p in pdir.iterdir())
        assert names == ["00000000000000000015.log", "00000000000000000015.snapshot"]
        rlmm.update_remote_log_segment_metadata(upd(made[2], S.DELETE_SEGMENT_STARTED))
        rlmm.update_remote_log_segment_metadata(upd(made[2], S.DELETE_SEGMENT_FINISHED))
        after = state_of(rlmm)
        assert after[2] == before[2]    # highest offsets keep deleted segments
    with open_rlmm(tmp_path, snapshot_interval_entries=5) as again:
        assert state_of(again) == after
        exported = again._loaded(TIP).cache.epoch_states()
    with open_rlmm(tmp_path) as third:
        assert third._loaded(TIP).cache.epoch_states() == exported


def test_crash_between_snapshot_and_new_log_recovers(tmp_path):
    with open_rlmm(tmp_path, snapshot_interval_entries=10_000) as rlmm:
        fill(rlmm)
        before = state_of(rlmm)
    pdir = next(tmp_path.glob("orders-0-*"))
    old_log = pdir / "00000000000000000000.log"
    saved = old_log.read_bytes()
    with open_rlmm(tmp_path, snapshot_interval_entries=1) as rlmm:
        rlmm.add_remote_log_segment_metadata(seg(800, 801, {4: 800}))
        expected = state_of(rlmm)
    new_names = sorted(p.name for p in pdir.iterdir())
    assert new_names == ["00000000000000000015.log", "00000000000000000015.snapshot"]
    # as if killed after the snapshot's rename: old log back, new log never created, tmp left
    (pdir / "00000000000000000015.log").unlink()
    old_log.write_bytes(saved)
    (pdir / "00000000000000000020.snapshot.tmp").write_bytes(b"partial")
    reader = EmbeddedRemoteLogMetadataManager.open_read_only(tmp_path)
    assert state_of(reader) == expected
    reader.close()
    with open_rlmm(tmp_path) as again:
        assert state_of(again) == expected
        assert sorted(p.name for p in pdir.iterdir()) == ["00000000000000000015.snapshot"]
        again.add_remote_log_segment_metadata(seg(900, 901, {4: 900}))
    with open_rlmm(tmp_path) as third:
        assert len(list(third.list_remote_log_segments(TIP))) == len(before[0]) + 2


def test_damaged_snapshot_is_an_error(tmp_path):
    with open_rlmm(tmp_path, snapshot_interval_entries=3) as rlmm:
        fill(rlmm)
    snapshot = next(tmp_path.glob("orders-0-*/*.snapshot"))
    data = bytearray(snapshot.read_bytes())
    data[len(data) // 2] ^= 0x04
    snapshot.write_bytes(data)
    with pytest.raises(CorruptRemoteLogMetadataError) as info:
        open_rlmm_and_read(tmp_path)
    assert info.value.file == str(snapshot)
    snapshot.write_bytes(bytes(data[:len(data) // 2]))        # truncated: also corruption
    with pytest.raises(CorruptRemoteLogMetadataError):
        open_rlmm_and_read(tmp_path)


# ---- readers ----------------------------------------------------------------------------

def test_read_only_reader_sees_writes_after_refresh(tmp_path):
    writer = open_rlmm(tmp_path, snapshot_interval_entries=4)
    made = fill(writer, n=3)
    reader = EmbeddedRemoteLogMetadataManager.open_read_only(tmp_path)
    assert reader.read_only and state_of(reader) == state_of(writer)
    late = seg(300, 399, {2: 300})
    writer.add_remote_log_segment_metadata(late)
    assert late.remote_log_segment_id not in {
        m.remote_log_segment_id for m in reader.list_remote_log_segments(TIP)}
    reader.refresh()
    assert state_of(reader) == state_of(writer)
    for _ in range(3):                 # crosses at least one compaction of the writer
        writer.update_remote_log_segment_metadata(upd(late, S.COPY_SEGMENT_FINISHED))
    writer.update_remote_log_segment_metadata(upd(made[2], S.DELETE_SEGMENT_STARTED))
    fill(writer, TIP2, n=2)            # a partition the reader has never seen
    reader.refresh()
    assert state_of(reader) == state_of(writer)
    assert state_of(reader, TIP2) == state_of(writer, TIP2)
    assert reader.list_partitions() == [TIP, TIP2]
    with pytest.raises(RemoteStorageError, match="read-only"):
        reader.add_remote_log_segment_metadata(seg(0, 1, {0: 0}))
    # an entry the writer is still writing is not an error for the reader
    log_file = next(tmp_path.glob("orders-0-*/*.log"))
    frame = metadata_log.encode_frame(metadata_log.encode_event(seg(5000, 5001, {9: 5000})))
    with open(log_file, "ab") as f:
        f.write(frame[:20])
    reader.refresh()
    assert state_of(reader) == state_of(writer)
    with open(log_file, "ab") as f:
        f.write(frame[20:])
    reader.refresh()
    assert len(list(reader.list_remote_log_segments(TIP))) == len(state_of(writer)[0]) + 1
    writer.close()
    reader.close()


# ---- threads ----------------------------------------------------------------------------

def test_concurrent_adds_and_updates(tmp_path):
    rlmm = open_rlmm(tmp_path, snapshot_interval_entries=16)
    errors, refused = [], []
    shared = [seg(10_000 + i * 10, 10_000 + i * 10 + 9, {50: 10_000 + i * 10}) for i in range(10)]
    for md in shared:
        rlmm.add_remote_log_segment_metadata(md)

    def work(worker):
        rng = random.Random(worker)
        tip = (TIP, TIP2)[worker % 2]
        try:
            for i in range(12):
                md = seg(worker * 1000 + i * 10, worker * 1000 + i * 10 + 9,
                         {worker: worker * 1000 + i * 10}, tip)
                rlmm.add_remote_log_segment_metadata(md)
                rlmm.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
                target = rng.choice([S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED,
                                     S.DELETE_SEGMENT_FINISHED])
                try:   # threads race each other over the shared segments
                    rlmm.update_remote_log_segment_metadata(upd(rng.choice(shared), target))
                except (IllegalStateTransitionError, RemoteResourceNotFoundError) as exc:
                    refused.append(exc)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    before = state_of(rlmm, TIP, range(10)), state_of(rlmm, TIP2, range(10))
    own = [m for m in before[0][0] + before[1][0] if m.start_offset < 10_000]
    assert len(own) == 8 * 12 and all(m.state == S.COPY_SEGMENT_FINISHED for m in own)
    for w in range(8):
        assert before[w % 2][2][w] == w * 1000 + 119
    rlmm.close()
    with open_rlmm(tmp_path) as again:
        assert (state_of(again, TIP, range(10)), state_of(again, TIP2, range(10))) == before


# ---- a real writer killed with SIGKILL --------------------------------------------------

DEFAULT_KILLS = 24


def _run_and_kill(directory: Path, seed: int, rng: random.Random) -> list[str]:
    proc = subprocess.Popen([sys.executable, str(WRITER), str(directory), "--seed", str(seed),
                             "--snapshot-interval", str(rng.choice([3, 7, 50]))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                            bufsize=0)  # unbuffered: communicate() reads the fd directly
    try:
        if rng.random() < 0.15:
            time.sleep(rng.uniform(0.0, 0.4))   # may land while it opens and recovers
        else:
            line = proc.stdout.readline()
            if line != b"ready\n":
                proc.kill()
                raise AssertionError(f"writer (seed {seed}) did not start: {line!r}\n"
                                     f"{proc.stderr.read().decode(errors='replace')}")
            time.sleep(rng.uniform(0.0, 0.25))
        if proc.poll() is not None:
            raise AssertionError(f"writer (seed {seed}) exited on its own with "
                                 f"{proc.returncode}: {proc.stderr.read().decode()}")
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out.decode().splitlines()


def _recovered(rlmm, partitions) -> dict[str, int]:
    return {str(m.remote_log_segment_id.id): int(m.state)
            for tip in partitions for m in rlmm.list_remote_log_segments(tip)}


def test_sigkill_of_a_writer_loses_no_acknowledged_event(tmp_path):
    import rlmm_crash_writer

    kills = count_at_least("RLMM_CRASH_KILLS", DEFAULT_KILLS)
    base_seed = int(os.environ.get("RLMM_CRASH_SEED", "405"))
    rng = random.Random(base_seed)
    directory = tmp_path / METADATA_DIR_NAME
    known: dict[str, int] = {}        # segment uuid -> state (3: DELETE_SEGMENT_FINISHED)
    acked_total = mid_compaction = 0
    for k in range(kills):
        lines = _run_and_kill(directory, base_seed * 1000 + k, rng)
        in_flight = None
        for line in lines:
            if line == "ready":
                continue
            word, sid, state = line.split()
            if word == "try":
                in_flight = (sid, int(state))
            else:
                assert (sid, int(state)) == in_flight, line
                known[sid] = int(state)
                in_flight = None
                acked_total += 1
        context = f"kill {k} (seed {base_seed * 1000 + k})"
        if any(len(list(d.iterdir())) > 2 for d in directory.glob("*-*-*")):
            mid_compaction += 1        # killed between a snapshot and the old files' removal
        # every other check is read-only, so the next writer recovers the crashed state
        if k % 2:
            checker = EmbeddedRemoteLogMetadataManager.open_read_only(directory)
        else:
            checker = EmbeddedRemoteLogMetadataManager(directory)
        with checker:
            found = _recovered(checker, rlmm_crash_writer.PARTITIONS)
        for sid, state in known.items():
            got = found.get(sid, 3)
            if in_flight is not None and sid == in_flight[0]:
                assert got in (state, in_flight[1]), context
            else:
                assert got == state, f"{context}: segment {sid} acked {state}, found {got}"
        for sid, state in found.items():
            if sid not in known:        # only the add in flight may appear unacknowledged
                assert in_flight == (sid, 0) and state == 0, context
        if in_flight is not None:
            known[in_flight[0]] = found.get(in_flight[0], 3)   # absent: deleted or never added
    assert acked_total > kills          # the writer got work done between kills
    print(f"{kills} kills, {acked_total} acknowledged events, {mid_compaction} kills "
          "inside a compaction")
    with EmbeddedRemoteLogMetadataManager(directory) as final:
        assert _recovered(final, rlmm_crash_writer.PARTITIONS) == {
            sid: s for sid, s in known.items() if s != 3}


def test_failed_write_is_cut_back_and_reported(tmp_path, monkeypatch):
    rlmm = open_rlmm(tmp_path)
    made = fill(rlmm, n=3)
    before = state_of(rlmm)
    (log_file,) = log_files(tmp_path)
    size = log_file.stat().st_size
    real = metadata_log._write_all

    def half_then_fail(fd, data):
        real(fd, data[:len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(metadata_log, "_write_all", half_then_fail)
    with pytest.raises(RemoteStorageError, match="No space left"):
        rlmm.update_remote_log_segment_metadata(upd(made[2], S.COPY_SEGMENT_FINISHED))
    assert log_file.stat().st_size == size and state_of(rlmm) == before
    monkeypatch.setattr(metadata_log, "_write_all", real)
    rlmm.update_remote_log_segment_metadata(upd(made[2], S.COPY_SEGMENT_FINISHED))
    after = state_of(rlmm)
    rlmm.close()
    with open_rlmm(tmp_path) as again:
        assert state_of(again) == after


def test_a_damaged_partition_does_not_stop_the_others(tmp_path):
    with open_rlmm(tmp_path) as rlmm:
        fill(rlmm)
        fill(rlmm, TIP2, n=2)
        good = state_of(rlmm, TIP2)
    damaged = next(tmp_path.glob("orders-0-*/*.log"))
    data = bytearray(damaged.read_bytes())
    data[40] ^= 0xFF                      # inside an early entry: damage in the middle
    damaged.write_bytes(data)
    reader = EmbeddedRemoteLogMetadataManager.open_read_only(tmp_path)
    assert state_of(reader, TIP2) == good
    reader.refresh()
    with pytest.raises(CorruptRemoteLogMetadataError):
        reader.list_remote_log_segments(TIP)
    reader.close()
    with open_rlmm(tmp_path) as rlmm:
        rlmm.on_partition_leadership_changes([TIP, TIP2], [])
        assert not rlmm.is_ready(TIP) and rlmm.is_ready(TIP2)
        assert state_of(rlmm, TIP2) == good
        with pytest.raises(CorruptRemoteLogMetadataError):
            rlmm.add_remote_log_segment_metadata(seg(900, 901, {4: 900}))
        assert damaged.read_bytes() == data



def test_damaged_partition_is_offline_with_one_log_line_and_named_errors(tmp_path, caplog):
    """A damaged partition is offline: logged once however often it is asked for, listed
    by offline_partitions, and every call raises the error naming the partition, file and
    position; stopping the partition lets a repaired copy load again."""
    with open_rlmm(tmp_path) as rlmm:
        fill(rlmm)
        fill(rlmm, TIP2, n=2)
    damaged = next(tmp_path.glob("orders-0-*/*.log"))
    good = damaged.read_bytes()
    data = bytearray(good)
    data[40] ^= 0xFF
    damaged.write_bytes(data)
    caplog.set_level(logging.INFO, logger="engine")
    with open_rlmm(tmp_path) as rlmm:
        for _ in range(3):
            assert isinstance(rlmm.partition_error(TIP), CorruptRemoteLogMetadataError)
            assert not rlmm.is_ready(TIP) and rlmm.partition_error(TIP2) is None
            with pytest.raises(CorruptRemoteLogMetadataError) as info:
                rlmm.list_remote_log_segments(TIP)
            assert info.value.partition == TIP and info.value.file == str(damaged)
            assert info.value.position is not None
            assert str(TIP) in str(info.value) and str(damaged) in str(info.value)
        assert list(rlmm.offline_partitions()) == [TIP]
        assert len([r for r in caplog.records if "offline" in r.getMessage()]) == 1
        damaged.write_bytes(good)  # repaired: read again once the partition is stopped
        rlmm.on_stop_partitions([TIP])
        assert rlmm.partition_error(TIP) is None and rlmm.offline_partitions() == {}


def test_unreadable_metadata_is_logged_once_until_it_changes(tmp_path, caplog):
    """Files that cannot be read now (not damage) are retried at every call, but the error
    is logged once, not at every call, and its end is logged too."""
    with open_rlmm(tmp_path) as rlmm:
        fill(rlmm)
    log_file = next(tmp_path.glob("orders-0-*/*.log"))
    moved = log_file.with_name("moved")
    log_file.rename(moved)
    log_file.mkdir()  # open() fails with IsADirectoryError
    caplog.set_level(logging.INFO, logger="engine")
    with open_rlmm(tmp_path) as rlmm:
        for _ in range(5):
            error = rlmm.partition_error(TIP)
            assert isinstance(error, IsADirectoryError), error
        assert rlmm.offline_partitions() == {}  # not damage: not kept offline
        assert len([r for r in caplog.records if "cannot be read" in r.getMessage()]) == 1
        log_file.rmdir()
        moved.rename(log_file)
        assert rlmm.partition_error(TIP) is None and rlmm.is_ready(TIP)
        assert [r for r in caplog.records if "can be read again" in r.getMessage()]

def test_reader_follows_a_live_writer_process_through_compactions(tmp_path):
    """A reader refreshing in a loop while a writer process appends and compacts every 3
    events: no refresh fails, and no segment's state ever goes backwards."""
    import rlmm_crash_writer

    directory = tmp_path / METADATA_DIR_NAME
    proc = subprocess.Popen([sys.executable, str(WRITER), str(directory), "--seed", "11",
                             "--snapshot-interval", "3"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, bufsize=0)
    try:
        assert proc.stdout.readline() == b"ready\n"
        reader = EmbeddedRemoteLogMetadataManager.open_read_only(directory)
        seen: dict[str, int] = {}
        bases: set[int] = set()      # snapshot numbers the reader went through
        refreshes = 0
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline or refreshes < 20:
            reader.refresh()
            refreshes += 1
            now = _recovered(reader, rlmm_crash_writer.PARTITIONS)
            for sid, state in seen.items():
                assert now.get(sid, 3) >= state, (sid, state, now.get(sid))
            seen.update(now)
            for sid in set(seen) - set(now):
                seen[sid] = 3
            bases.update(reader._entry(tip).files.base for tip in rlmm_crash_writer.PARTITIONS)
        assert proc.poll() is None, proc.stderr.read()
    finally:
        proc.kill()
        proc.communicate()
    reader.refresh()
    with EmbeddedRemoteLogMetadataManager(directory) as writer:
        assert _recovered(writer, rlmm_crash_writer.PARTITIONS) == _recovered(
            reader, rlmm_crash_writer.PARTITIONS)
    assert len(seen) > 5 and len(bases) > 3
