"""The broker plugin (kafka-plugin/) as the tests use it: where `scripts/setup.sh` built it,
and its test driver (kafka-plugin/src/test/java/.../PluginDriver.java), which configures the
plugin's RemoteStorageManager as a broker would and runs a script of calls, one JSON line
each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = ROOT / "kafka-plugin" / "target"
PLUGIN_JAR = PLUGIN_DIR / "kafka-tier-engine-plugin.jar"
VENV = Path(sys.prefix)
RSM_CLASS = "tierengine.kafka.EngineRemoteStorageManager"
#: where setup.sh installs the jar for brokers: inside the venv, which the plugin then finds
#: without `rsm.config.engine.venv`
INSTALLED_JAR = VENV / "share" / "kafka-tier-engine" / "kafka-tier-engine-plugin.jar"


def plugin_jar() -> Path:
    """The built plugin jar; a missing build fails the test (setup.sh builds it)."""
    if not PLUGIN_JAR.is_file():
        pytest.fail(f"{PLUGIN_JAR} is missing: scripts/setup.sh builds it", pytrace=False)
    return PLUGIN_JAR


def driver_classpath(jar: Path | None = None) -> str:
    provided = (PLUGIN_DIR / "provided.classpath").read_text().strip()
    return os.pathsep.join([str(jar or plugin_jar()), str(PLUGIN_DIR / "test-classes"),
                            provided])


def metadata_words(md) -> str:
    """A RemoteLogSegmentMetadata as the driver's key=value words."""
    tip = md.topic_id_partition
    epochs = ",".join(f"{e}:{o}" for e, o in md.leader_epochs)
    words = [f"topicId={tip.topic_id}", f"topic={tip.topic}", f"partition={tip.partition}",
             f"segmentId={md.remote_log_segment_id.id}", f"start={md.start_offset}",
             f"end={md.end_offset}", f"size={md.segment_size_in_bytes}",
             f"maxTs={md.max_timestamp_ms}", f"epochs={epochs}"]
    if md.custom_metadata is not None:
        words.append(f"custom={md.custom_metadata.hex()}")
    return " ".join(words)


def describe(md) -> str:
    """A RemoteLogSegmentMetadata in the one line the Java side hands the bridge
    (EngineRemoteStorageManager.describe), for calling the bridge from Python."""
    tip = md.topic_id_partition
    epochs = ",".join(f"{e}:{o}" for e, o in md.leader_epochs)
    custom = "-" if md.custom_metadata is None else md.custom_metadata.hex()
    return " ".join(map(str, [
        tip.topic_id, tip.topic, tip.partition, md.remote_log_segment_id.id, md.start_offset,
        md.end_offset, md.max_timestamp_ms, md.broker_id, md.event_timestamp_ms,
        md.segment_size_in_bytes, int(md.state), str(md.txn_idx_empty).lower(), epochs,
        custom]))


def copy_words(data) -> str:
    """A LogSegmentData as the driver's words (the leader-epoch bytes go through a file)."""
    epochs = data.log_segment.with_suffix(".epochs-bytes")
    epochs.write_bytes(data.leader_epoch_index)
    words = [f"log={data.log_segment}", f"offsetIndex={data.offset_index}",
             f"timeIndex={data.time_index}", f"snapshot={data.producer_snapshot}",
             f"leaderEpoch={epochs}"]
    if data.transaction_index is not None:
        words.append(f"txnIndex={data.transaction_index}")
    return " ".join(words)


def run_driver(tmp: Path, configs: dict, script: list[str], *, env: dict | None = None,
               timeout: float = 180, java_opts: tuple = (),
               jar: Path | None = None, java: str = "java") -> list[dict]:
    """Runs the driver (on `java`) with `configs` as the plugin's settings (`rsm.config.`
    stripped, as Kafka passes them); returns its JSON lines. A driver that dies fails the
    test with its stderr."""
    tmp.mkdir(parents=True, exist_ok=True)
    props, commands = tmp / "rsm.properties", tmp / "script.txt"
    props.write_text("".join(f"{k}={v}\n" for k, v in configs.items()))
    commands.write_text("\n".join(script) + "\n")
    proc = subprocess.run(
        [java, *java_opts, "-cp", driver_classpath(jar), "tierengine.kafka.PluginDriver",
         str(props), str(commands)],
        capture_output=True, text=True, timeout=timeout, env=env)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode not in (0, 3) or not lines:
        pytest.fail(f"plugin driver exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}"
                    f"\nstderr:\n{proc.stderr[-5000:]}", pytrace=False)
    return lines
