"""Checkpoint text files, leader-epoch semantics, partition.metadata and Uuid, including the
real files of a Kafka 4.0 KRaft data dir."""

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.common import TopicPartition, Uuid, write_file_atomically
from engine.errors import CorruptCheckpointError
from engine.log.checkpoint import (
    CheckpointFile,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    epoch_entries_in_range,
    epoch_for_offset,
)

DATADIR = (Path(__file__).resolve().parents[1].parent / "shared" / "vectors"
           / "codecrafters-kafka-tester-kraft-datadir")


def logs_dir(commit):
    path = DATADIR / commit / "kraft-combined-logs"
    if not path.is_dir():
        pytest.fail(f"conformance vectors not found at {path}")
    return path


# ---- generic format -----------------------------------------------------------------------

class Words:
    def to_line(self, entry):
        return entry

    def from_line(self, line):
        return line if line.isalpha() else None


def test_generic_checkpoint_round_trip(tmp_path):
    checkpoint = CheckpointFile(tmp_path / "words", 3, Words())
    assert (tmp_path / "words").read_bytes() == b"" and checkpoint.read() == []
    checkpoint.write(["alpha", "beta"])
    assert (tmp_path / "words").read_bytes() == b"3\n2\nalpha\nbeta\n"
    assert checkpoint.read() == ["alpha", "beta"]
    assert not (tmp_path / "words.tmp").exists()


def test_missing_file_without_create(tmp_path):
    with pytest.raises(FileNotFoundError):
        LeaderEpochCheckpointFile(tmp_path / "none", create=False).read()


@pytest.mark.parametrize("content, reason", [
    (b"1\n0\n", "unrecognised checkpoint version 1"),
    (b"x\n", "malformed"),
    (b"0 \n", "malformed"),          # Java's parseInt refuses surrounding spaces
    (b"0\nx\n", "malformed"),
    (b"0\n2\n0 0\n", "expected 2 entries"),
    (b"0\n1\n0\n", "malformed"),
    (b"0\n1\n 0 0\n", "malformed"),  # a leading space makes an empty first field in Java
    (b"0\n1\n0 0 0\n", "malformed"),
    (b"0\n1\n2147483648 0\n", "malformed"),  # epoch beyond int32
    (b"0\n1\n0 1_0\n", "malformed"),
    (b"0\n1\n0 0\n\n", "malformed"),  # an empty line is an entry line
    (b"0\n1\n\xff 0\n", "UTF-8"),
])
def test_malformed_checkpoints(tmp_path, content, reason):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=reason) as err:
        LeaderEpochCheckpointFile(path).read()
    assert err.value.file == path and isinstance(err.value, OSError)
    assert err.value.position is not None and 0 <= err.value.position <= len(content)


@pytest.mark.parametrize("content, entries", [
    (b"0\n1\n3 7", [(3, 7)]),                 # no final newline
    (b"0\r\n1\r\n3\t7\r\n", [(3, 7)]),        # CR LF and a tab
    (b"0\r1\r3   7 \r", [(3, 7)]),            # CR only; trailing whitespace is dropped
    (b"0\n", []),
    (b"+0\n1\n-1 +5\n", [(-1, 5)]),
])
def test_lenient_forms_java_accepts(tmp_path, content, entries):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    assert LeaderEpochCheckpointFile(path).read() == entries


def test_write_failure_leaves_no_trace(tmp_path):
    path = tmp_path / "gone" / "leader-epoch-checkpoint"
    checkpoint = LeaderEpochCheckpointFile(tmp_path / "x", create=False)
    checkpoint._file = path
    assert checkpoint.write_if_dir_exists([EpochEntry(1, 2)]) is False
    target = tmp_path / "target"
    target.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_file_atomically(target, "not bytes")
    assert target.read_bytes() == b"old" and not (tmp_path / "target.tmp").exists()


# ---- leader epochs ------------------------------------------------------------------------

def test_epoch_for_offset():
    entries = [EpochEntry(0, 0), EpochEntry(2, 3), EpochEntry(5, 10)]
    assert [epoch_for_offset(entries, o) for o in (-1, 0, 2, 3, 9, 10, 99)] == \
        [None, 0, 0, 2, 2, 5, 5]
    assert epoch_for_offset([], 5) is None
    assert epoch_for_offset([EpochEntry(1, 5)], 4) is None


def test_epoch_entries_in_range():
    entries = [EpochEntry(0, 0), EpochEntry(2, 3), EpochEntry(5, 10)]
    assert epoch_entries_in_range(entries, 3, 10) == [(2, 3)]
    assert epoch_entries_in_range(entries, 4, 10) == [(2, 4)]
    assert epoch_entries_in_range(entries, 0, 3) == [(0, 0)]
    assert epoch_entries_in_range(entries, 11, 20) == [(5, 11)]
    assert epoch_entries_in_range(entries, 1, 11) == [(0, 1), (2, 3), (5, 10)]
    assert epoch_entries_in_range(entries, -1, 5) == [(0, 0), (2, 3)]
    assert epoch_entries_in_range(entries, 2, -1) == [(0, 2), (2, 3), (5, 10)]
    assert epoch_entries_in_range(entries, 0, 0) == []
    assert epoch_entries_in_range([], 0, 10) == []


cache_st = st.lists(st.tuples(st.integers(1, 5), st.integers(1, 20)), max_size=8).map(
    lambda steps: [EpochEntry(sum(e for e, _ in steps[:i + 1]), sum(o for _, o in steps[:i + 1]))
                   for i in range(len(steps))])


@settings(max_examples=300, deadline=None)
@given(entries=cache_st, start=st.integers(0, 120), length=st.integers(1, 60))
def test_range_keeps_every_offsets_epoch(entries, start, length):
    end = start + length
    ranged = epoch_entries_in_range(entries, start, end)
    assert all(start <= e.start_offset < end for e in ranged)
    for offset in range(start, end):
        # Independent statement of epochForOffset: exact start wins, else last start below.
        exact = [e.epoch for e in entries if e.start_offset == offset]
        below = [e.epoch for e in entries if e.start_offset < offset]
        want = exact[0] if exact else (below[-1] if below else None)
        assert epoch_for_offset(entries, offset) == want
        assert epoch_for_offset(ranged, offset) == want


@pytest.mark.parametrize("commit, partition, entries", [
    ("e856b9a", "foo-0", [(0, 0), (2, 3)]),
    ("510714e", "foo-0", [(0, 0)]),
    ("e856b9a", "__cluster_metadata-0", [(1, 0), (2, 81)]),
    ("510714e", "__cluster_metadata-0", [(1, 0)]),
])
def test_real_leader_epoch_checkpoints(tmp_path, commit, partition, entries):
    original = logs_dir(commit) / partition / "leader-epoch-checkpoint"
    assert LeaderEpochCheckpointFile(original, create=False).read() == entries
    copy = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    copy.write([EpochEntry(*e) for e in entries])
    assert copy.file.read_bytes() == original.read_bytes()
    assert copy.read() == entries


def test_manifest_leader_epoch_bytes():
    base = logs_dir("e856b9a")
    assert (base / "foo-0" / "leader-epoch-checkpoint").read_bytes() == b"0\n2\n0 0\n2 3\n"
    assert (logs_dir("510714e") / "foo-0" / "leader-epoch-checkpoint").read_bytes() == \
        b"0\n1\n0 0\n"


# ---- offset checkpoints -------------------------------------------------------------------

@pytest.mark.parametrize("commit, name, offsets", [
    ("e856b9a", "recovery-point-offset-checkpoint", {("foo", 0): 3}),
    ("e856b9a", "replication-offset-checkpoint", {("foo", 0): 3}),
    ("510714e", "recovery-point-offset-checkpoint", {("foo", 0): 1}),
    ("510714e", "replication-offset-checkpoint", {("foo", 0): 1}),
    ("e856b9a", "log-start-offset-checkpoint", {}),
    ("510714e", "log-start-offset-checkpoint", {}),
    ("e856b9a", "cleaner-offset-checkpoint", {}),
    ("510714e", "cleaner-offset-checkpoint", {}),
])
def test_real_offset_checkpoints(tmp_path, commit, name, offsets):
    original = logs_dir(commit) / name
    read = OffsetCheckpointFile(original, create=False).read()
    assert read == offsets and all(isinstance(k, TopicPartition) for k in read)
    copy = OffsetCheckpointFile(tmp_path / name)
    copy.write(read)
    if original.stat().st_size == 0:
        # Kafka's constructor created this file empty and nothing wrote it since; a write
        # always produces the full format.
        assert copy.file.read_bytes() == b"0\n0\n"
    else:
        assert copy.file.read_bytes() == original.read_bytes()


def test_offset_checkpoint_rules(tmp_path):
    checkpoint = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    checkpoint.write({("b", 1): 10, TopicPartition("a", 0): 2**63 - 1})
    assert checkpoint.file.read_bytes() == b"0\n2\nb 1 10\na 0 9223372036854775807\n"
    assert list(checkpoint.read()) == [("b", 1), ("a", 0)]
    with pytest.raises(ValueError):
        checkpoint.write({("bad topic", 0): 1})
    for content in (b"0\n1\nfoo 0\n", b"0\n1\nfoo x 3\n", b"0\n1\nfoo 0 9223372036854775808\n"):
        checkpoint.file.write_bytes(content)
        with pytest.raises(CorruptCheckpointError, match="malformed"):
            checkpoint.read()
    checkpoint.file.write_bytes(b"0\n2\nfoo 0 1\nfoo 0 5\n")
    assert checkpoint.read() == {("foo", 0): 5}  # the last line for a partition wins


# ---- partition.metadata and Uuid ------------------------------------------------------------

@pytest.mark.parametrize("commit, partition, topic_id", [
    ("e856b9a", "foo-0", "fZi4qEpCTsik-rzkyV0Ypg"),
    ("510714e", "foo-0", "v9meXjI1RVKB-NSvF0GXDA"),
    ("e856b9a", "__cluster_metadata-0", "AAAAAAAAAAAAAAAAAAAAAQ"),
    ("510714e", "__cluster_metadata-0", "AAAAAAAAAAAAAAAAAAAAAQ"),
])
def test_real_partition_metadata(tmp_path, commit, partition, topic_id):
    original = logs_dir(commit) / partition / "partition.metadata"
    metadata = PartitionMetadataFile(original).read()
    assert metadata.version == 0 and str(metadata.topic_id) == topic_id
    copy = PartitionMetadataFile(tmp_path / "partition.metadata")
    copy.write(metadata.topic_id)
    assert copy.file.read_bytes() == original.read_bytes()
    assert copy.file.read_bytes() == f"version: 0\ntopic_id: {topic_id}".encode()
    if partition.startswith("__cluster"):
        assert metadata.topic_id == Uuid.METADATA_TOPIC_ID


@pytest.mark.parametrize("content, reason", [
    (b"", "malformed"),
    (b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "unrecognised"),
    (b"version:0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "malformed"),
    (b"version: 0\n", "malformed"),
    (b"version: 0\ntopic_id: AAAA", "malformed"),
    (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "zero"),
])
def test_malformed_partition_metadata(tmp_path, content, reason):
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=reason) as err:
        PartitionMetadataFile(path).read()
    assert err.value.file == path


def test_partition_metadata_lifecycle(tmp_path):
    metadata = PartitionMetadataFile(tmp_path / "partition.metadata")
    assert not metadata.exists() and not metadata.delete()
    topic_id = Uuid.random()
    metadata.write(topic_id, sync=False)
    assert metadata.exists() and metadata.read().topic_id == topic_id
    with pytest.raises(TypeError):
        metadata.write(str(topic_id))
    assert metadata.delete()


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=16, max_size=16))
def test_uuid_round_trips(data):
    uuid = Uuid.from_bytes(data)
    text = str(uuid)
    assert len(text) == 22 and "=" not in text and "+" not in text and "/" not in text
    assert Uuid.from_string(text) == uuid and bytes(uuid) == data
    assert Uuid.from_string(text + "==") == uuid
    assert Uuid(uuid.most_significant_bits, uuid.least_significant_bits) == uuid
    assert hash(Uuid.from_bytes(data)) == hash(uuid)


def test_uuid_details():
    assert str(Uuid.METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert str(Uuid.ZERO) == "AAAAAAAAAAAAAAAAAAAAAA"
    minus_one = Uuid(-1, -1)
    assert str(minus_one) == "_____________________w" and minus_one.most_significant_bits == -1
    ids = {Uuid.random() for _ in range(200)}
    assert len(ids) == 200
    assert all(not str(u).startswith("-") and u not in (Uuid.ZERO, Uuid.METADATA_TOPIC_ID)
               for u in ids)
    for bad in ("AAAA", "A" * 23, "AAAAAAAAAAAAAAAAAAAA+Q", "AAAAAAAAAAAAAAAAAAAAAQ=", 5):
        with pytest.raises(ValueError):
            Uuid.from_string(bad)
    with pytest.raises(ValueError):
        Uuid(2**64, 0)
    with pytest.raises(AttributeError):
        minus_one._bytes = b""


def test_checkpoint_files_in_a_copied_log_dir(tmp_path):
    copy = Path(shutil.copytree(logs_dir("e856b9a"), tmp_path / "logs"))
    recovery = OffsetCheckpointFile(copy / "recovery-point-offset-checkpoint")
    recovery.write({**recovery.read(), ("bar", 2): 17})
    assert recovery.read() == {("foo", 0): 3, ("bar", 2): 17}
    epochs = LeaderEpochCheckpointFile(copy / "foo-0" / "leader-epoch-checkpoint")
    ranged = epoch_entries_in_range(epochs.read(), 1, 3)
    assert ranged == [(0, 1)] and epoch_for_offset(epochs.read(), 2) == 0


def test_uuid_pickles():
    import pickle

    topic_id = Uuid.random()
    assert pickle.loads(pickle.dumps(topic_id)) == topic_id


def test_leader_epoch_checkpoint_text_is_the_checkpoint_files_encoding(tmp_path):
    """The copier's leader-epoch index and a written `leader-epoch-checkpoint` are the same
    bytes: one encoder, truncated at the next segment's base offset."""
    from engine.log.checkpoint import leader_epoch_checkpoint_text

    entries = [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(5, 30)]
    checkpoint = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    checkpoint.write(entries[:2], sync=False)
    assert leader_epoch_checkpoint_text(entries, 30) == checkpoint.file.read_bytes()
    assert leader_epoch_checkpoint_text(entries, 31) == \
        LeaderEpochCheckpointFile.encode_entries(entries)
