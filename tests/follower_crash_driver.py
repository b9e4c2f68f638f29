"""Child process of tests/test_follower_from_tier.py: builds a follower's partition from the
remote tier and kills itself with SIGKILL just before its K-th change to the follower's
files (not a test module).

    follower_crash_driver.py SPEC.json K

SPEC.json names the follower's log dirs, the tier dir, the leader's RLMM directory (read
only here), the topic config, the partition, its leader epoch and the leader's offsets
(`build_remote_log_aux_state`'s keyword arguments). The changes counted are the real ones
the build makes once it starts: a segment deleted or created, the producer snapshots
deleted, a file written atomically (epoch checkpoint, producer snapshot, log start offset
checkpoint). When K is past the last change the build completes and "done <next offset>" is
printed.
"""

from __future__ import annotations

import json
import os
import signal
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.config import BrokerConfig
from engine.log import LogManager, checkpoint, unified_log
from engine.log.producer_state import ProducerStateManager
from engine.log.segment import LogSegment
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.rlm import RemoteLogManager

_armed = False
_count = 0
_kill_at = 0


def _step() -> None:
    global _count
    if not _armed:
        return
    _count += 1
    if _count == _kill_at:
        os.kill(os.getpid(), signal.SIGKILL)


def _counted(fn):
    def wrapper(*args, **kwargs):
        _step()
        return fn(*args, **kwargs)
    return wrapper


def _hook() -> None:
    checkpoint.write_file_atomically = _counted(checkpoint.write_file_atomically)
    unified_log.write_file_atomically = _counted(unified_log.write_file_atomically)
    LogSegment.delete = _counted(LogSegment.delete)
    create = LogSegment.create.__func__
    LogSegment.create = classmethod(_counted(create))
    ProducerStateManager.delete_snapshots_after = _counted(
        ProducerStateManager.delete_snapshots_after)


def main(spec_path: str, kill_at: int) -> None:
    global _armed, _kill_at
    with open(spec_path) as f:
        spec = json.load(f)
    _kill_at = kill_at
    _hook()
    config = BrokerConfig({"log.dirs": ",".join(spec["dirs"]),
                           "remote.log.storage.system.enable": "true",
                           "rsm.config.dirs": spec["tier"], "broker.id": "1"})
    manager = LogManager(spec["dirs"], broker_config=config,
                         topic_defaults=spec["topic_config"])
    rsm = FileSystemRemoteStorageManager([spec["tier"]], fsync=False)
    rlmm = EmbeddedRemoteLogMetadataManager.open_read_only(spec["metadata_dir"])
    rlm = RemoteLogManager(config, manager, rsm, rlmm, broker_id=1)
    topic, partition = spec["topic"], spec["partition"]
    rlm.on_leadership_change({}, followers={(topic, partition): spec["epoch"]})
    _armed = True
    next_offset = rlm.build_remote_log_aux_state(topic, partition, **spec["leader"])
    _armed = False
    rlm.close()
    rlmm.close()
    rsm.close()
    manager.shutdown()
    print(f"done {next_offset}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
