"""A topic has one topic id (Kafka's controller gives it one): every partition directory the
commands create carries the same `partition.metadata`, the tier holds the topic under that
one id, and partitions that already disagree are refused by name (real subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.common import Uuid
from engine.errors import InconsistentTopicIdError
from engine.log.checkpoint import PartitionMetadataFile
from engine.log.log_manager import LogManager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BROKER = """\
log.dirs={dirs}
remote.log.storage.system.enable=true
rsm.config.dirs={tier}
remote.storage.enable=true
log.retention.ms=-1
log.local.retention.bytes=16384
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _topic_ids(log_dirs, topic: str) -> dict[str, str]:
    """Partition directory -> the topic id its partition.metadata names (None: no file)."""
    out = {}
    for d in log_dirs:
        for name in sorted(os.listdir(d)):
            if name.startswith(f"{topic}-") and os.path.isdir(d / name):
                meta = PartitionMetadataFile(d / name / "partition.metadata")
                out[name] = str(meta.read().topic_id) if meta.exists() else None
    return out


def _broker(tmp_path, log_dirs) -> str:
    (tmp_path / "tier").mkdir()
    path = tmp_path / "server.properties"
    path.write_text(BROKER.format(dirs=",".join(map(str, log_dirs)), tier=tmp_path / "tier"))
    return str(path)


def test_produce_demo_and_run_give_every_partition_the_topic_id(tmp_path):
    log_dirs = [tmp_path / f"d{i}" for i in range(3)]
    proc = cli("produce-demo", "--log-dirs", ",".join(map(str, log_dirs)), "--topic",
               "orders", "--partitions", "4", "--records", "2000", "--segment-bytes", "16384")
    assert proc.returncode == 0, proc.stderr
    ids = _topic_ids(log_dirs, "orders")
    assert len(ids) == 4 and len(set(ids.values())) == 1 and None not in ids.values(), ids
    proc = cli("run", "--config", _broker(tmp_path, log_dirs), "--until-idle")
    assert proc.returncode == 0, proc.stderr
    assert "copied" in proc.stderr
    assert _topic_ids(log_dirs, "orders") == ids  # run kept the id
    (topic_id,) = set(ids.values())
    # the filesystem tier keeps a directory per partition, `<topic>-<partition>-<topic id>`
    tier = tmp_path / "tier" / "kafka-tiered-storage"
    names = sorted(os.listdir(tier))
    assert names == [f"orders-{p}-{topic_id}" for p in range(4)], names


def test_run_gives_partitions_without_an_id_one_id(tmp_path):
    """Partitions created without a topic id (an older engine, a copied Kafka dir) get one
    id for the whole topic from `run`, not one each."""
    log_dirs = [tmp_path / "d0", tmp_path / "d1"]
    proc = cli("produce-demo", "--log-dirs", ",".join(map(str, log_dirs)), "--topic",
               "orders", "--partitions", "3", "--records", "900", "--segment-bytes", "16384")
    assert proc.returncode == 0, proc.stderr
    for d in log_dirs:
        for name in os.listdir(d):
            if name.startswith("orders-") and (d / name / "partition.metadata").exists():
                os.remove(d / name / "partition.metadata")
    proc = cli("run", "--config", _broker(tmp_path, log_dirs), "--until-idle")
    assert proc.returncode == 0, proc.stderr
    ids = _topic_ids(log_dirs, "orders")
    assert len(ids) == 3 and len(set(ids.values())) == 1 and None not in ids.values(), ids


def test_run_refuses_a_topic_whose_partitions_disagree(tmp_path):
    """Which id the tier's data is under cannot be guessed: nothing is tiered, and the one
    error line names each partition with its id."""
    log_dirs = [tmp_path / "d0", tmp_path / "d1"]
    proc = cli("produce-demo", "--log-dirs", ",".join(map(str, log_dirs)), "--topic",
               "orders", "--partitions", "2", "--records", "600", "--segment-bytes", "16384")
    assert proc.returncode == 0, proc.stderr
    other = Uuid.random()
    (p1,) = [d / "orders-1" for d in log_dirs if (d / "orders-1").is_dir()]
    PartitionMetadataFile(p1 / "partition.metadata").write(other)
    ids = _topic_ids(log_dirs, "orders")
    proc = cli("run", "--config", _broker(tmp_path, log_dirs), "--until-idle")
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "InconsistentTopicIdError" in lines[0]
    for name, topic_id in ids.items():
        assert f"{name} has {topic_id}" in lines[0], lines[0]
    tier = tmp_path / "tier"
    assert [n for _, _, files in os.walk(tier) for n in files] == [], list(os.walk(tier))
    assert _topic_ids(log_dirs, "orders") == ids  # nothing rewritten


def test_log_manager_new_partitions_take_the_topic_id(tmp_path):
    with LogManager([tmp_path / "a", tmp_path / "b"]) as manager:
        manager.get_or_create_log("t", 0)
        manager.get_or_create_log("t", 1)
        topic_id = manager.topic_id("t")
        assert manager.get_or_create_log("t", 2).partition_metadata.read().topic_id == \
            topic_id
        with pytest.raises(InconsistentTopicIdError, match="t-3"):
            manager.get_or_create_log("t", 3, topic_id=Uuid.random())
        assert manager.get_log("t", 3) is None
    ids = _topic_ids([tmp_path / "a", tmp_path / "b"], "t")
    assert set(ids.values()) == {str(topic_id)} and len(ids) == 3
