"""`python -m engine kafka-broker`, the README's one command to try the broker plugin: a real
Kafka broker (KRaft) with the engine as its RemoteStorageManager and a local SeaweedFS comes
up, a topic with remote storage enabled tiers and reads back from offset 0 through the Java
client, and SIGINT stops the broker and the S3 server cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kafka_cluster import LIB_DIR, ClientError, run_client
from kafka_tiered_support import TIERED_TOPIC, produced_view, record_view, wait_until


def _line(proc, prefix: str, lines: list[str], timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"kafka-broker exited before {prefix!r}: {lines}")
        lines.append(line)
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    raise AssertionError(f"no {prefix!r} line within {timeout} s: {lines}")


def test_kafka_broker_tiers_a_topic_and_stops_cleanly(tmp_path):
    data = tmp_path / "broker"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "kafka-broker", "--kafka-libs", str(LIB_DIR),
         "--dir", str(data), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    lines: list[str] = []
    try:
        bootstrap = _line(proc, "bootstrap: ", lines)
        config = Path(_line(proc, "broker properties: ", lines))
        # the broker logs to the same pipe: keep draining it, or the broker blocks
        drain = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        drain.start()
        props = config.read_text()
        assert "remote.log.storage.manager.class.name=tierengine.kafka." \
               "EngineRemoteStorageManager" in props
        assert "rsm.config.storage.backend.class=io.aiven.kafka.tieredstorage.storage.s3." \
               "S3Storage" in props

        def client(*args, timeout=120):
            return run_client([args[0], "--bootstrap", bootstrap, *args[1:]], timeout)

        configs = [w for k, v in TIERED_TOPIC.items() for w in ("--config", f"{k}={v}")]
        wait_until("the broker to create a topic",
                   lambda: _created(client, "try", configs), timeout=120, interval=1)
        produced = client("produce", "--topic", "try", "--count", "3000", "--value-size",
                          "1000", "--seed", "5", timeout=180)

        def tiered():
            [o] = client("list-offsets", "--topic", "try", "--partitions", "0", "--spec",
                         "earliest-local")
            return o["offset"] > 0

        wait_until("segments to leave the broker's disk", tiered, timeout=180, interval=2)
        lines_out = client("consume", "--topic", "try", "--partitions", "0", "--idle-ms",
                           "4000", "--timeout-ms", "100000", timeout=150)
        got = [r for r in lines_out if r["type"] == "record"]
        assert record_view(got) == produced_view(produced)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    time.sleep(0.5)  # the drain thread reads the last lines
    out = "".join(lines)
    assert proc.returncode == 0, out[-5000:]
    assert "Traceback" not in out
    # the S3 server went with it: nothing of the run is still running
    leftover = subprocess.run(["pgrep", "-f", str(data)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", leftover.stdout


def _created(client, topic: str, configs: list[str]) -> bool:
    """Creates the topic; False while the broker does not answer yet."""
    try:
        client("create-topic", "--topic", topic, *configs, timeout=90)
    except ClientError:
        return False
    return True
