"""The offsets store of `serve` killed with SIGKILL in the middle of a compaction loses no
acknowledged commit; a damaged store stops `serve` with an error naming the file and
position, and `python -m engine offsets-recover` (the README's one command) brings back
everything before the damage, keeping a copy of the damaged file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from groups_support import build_group_broker
from serve_support import ROOT, TOPIC, ServeProcess

from engine.protocol.offsets_store import OFFSETS_STORE_FILE, OffsetsStore

DRIVER = ROOT / "tests" / "offsets_compaction_driver.py"


@pytest.mark.parametrize("when", ["before-rename", "after-rename"])
def test_kill_9_during_compaction_loses_no_acknowledged_commit(tmp_path, when):
    proc = subprocess.Popen([sys.executable, str(DRIVER), str(tmp_path), when],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    acked = {}
    try:
        for line in proc.stdout:  # the driver says when it stands at the compaction point
            if line.startswith("paused"):
                break
            i = int(line.split()[1])
            acked[i % 7] = i
            assert i < 20_000, "no compaction while commits go on"
        else:
            raise AssertionError(f"the driver ended without compacting: {proc.wait()}")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
    assert len(acked) == 7 and max(acked.values()) > 900
    store = OffsetsStore(tmp_path)
    for p, i in acked.items():
        got = store.get("g")[("t", p)]
        assert got.offset >= i and got.metadata == f"m{got.offset}", (p, i, got)
    store.close()


def test_a_damaged_store_stops_serve_naming_it_and_offsets_recover_keeps_the_rest(tmp_path):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    config, _ = build_group_broker(tmp_path)
    server = ServeProcess(config)
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="g",
                      enable_auto_commit=False)
    try:
        for p in range(3):
            c.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(10 + p, "", -1)})
    finally:
        c.close()
    assert server.stop() == 0
    path = tmp_path / "d1" / OFFSETS_STORE_FILE
    data = bytearray(path.read_bytes())
    second = 8 + int.from_bytes(data[:4], "big")
    data[second + 20] ^= 0xFF  # the second commit's frame, with the third after it
    path.write_bytes(bytes(data))
    run = subprocess.run([sys.executable, "-m", "engine", "serve", "--config", config],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert f"position {second}" in run.stderr and str(path) in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    recover = subprocess.run([sys.executable, "-m", "engine", "offsets-recover", "--config",
                              config], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert recover.returncode == 0, recover.stderr
    [copy] = path.parent.glob(OFFSETS_STORE_FILE + ".damaged-*")
    assert copy.read_bytes() == bytes(data)
    server = ServeProcess(config)
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="g",
                      enable_auto_commit=False)
    try:
        got = [c.committed(TopicPartition(TOPIC, p)) for p in range(3)]
    finally:
        c.close()
        server.kill()
    assert got == [10, None, None]
