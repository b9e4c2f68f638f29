"""Child process of tests/test_tiered_crash.py and tests/test_expiration_crash.py:
`python -m engine run --until-idle` that kills itself with SIGKILL at its K-th write or
delete of one kind.

    tiered_crash_driver.py CONFIG meta K        # K-th remote-metadata event: half the
                                                # frame written to the RLMM's log
    tiered_crash_driver.py CONFIG copy K        # K-th file copied to the tier: half the
                                                # bytes written to its .tmp
    tiered_crash_driver.py CONFIG expire K      # K-th remote segment delete of the
                                                # expiration, before it starts
    tiered_crash_driver.py CONFIG expire-rsm K  # K-th RSM delete: after its
                                                # DELETE_SEGMENT_STARTED, before the files go

The writes are the real ones of the embedded RLMM (engine.remote.metadata_log) and the
filesystem tier (engine.remote.filesystem), wrapped so the kill lands inside them: a torn
metadata frame, a partial segment file. Kills at random times are done by the test on
`python -m engine run` itself.
"""

from __future__ import annotations

import os
import signal
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.cli import main
from engine.remote import metadata_log
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.filesystem import copy as filesystem
from engine.rlm.expiration import RLMExpirationTask


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _arm_meta(k: int) -> None:
    original = metadata_log._write_all
    calls = [0]

    def write_all(fd: int, data: bytes) -> None:
        calls[0] += 1
        if calls[0] == k:
            os.write(fd, bytes(data)[: max(1, len(data) // 2)])
            os.fsync(fd)
            _die()
        original(fd, data)

    metadata_log._write_all = write_all


def _arm_copy(k: int) -> None:
    original = filesystem._copy_file
    calls = [0]

    def copy_file(source, out: int, dest):
        calls[0] += 1
        if calls[0] == k:
            with open(source, "rb") as f:
                data = f.read()
            os.write(out, data[: len(data) // 2])
            _die()
        return original(source, out, dest)

    filesystem._copy_file = copy_file


def _arm_expire(k: int) -> None:
    """The expiration window: the new log start offset is published and checkpointed, the
    segments below it are deleted one by one (RLMExpirationTask.delete_remote_segment)."""
    original = RLMExpirationTask.delete_remote_segment
    calls = [0]

    def delete_remote_segment(self, st, md, custom):
        calls[0] += 1
        if calls[0] == k:
            _die()
        return original(self, st, md, custom)

    RLMExpirationTask.delete_remote_segment = delete_remote_segment


def _arm_expire_rsm(k: int) -> None:
    original = FileSystemRemoteStorageManager.delete_log_segment_data
    calls = [0]

    def delete_log_segment_data(self, metadata):
        calls[0] += 1
        if calls[0] == k:
            _die()
        return original(self, metadata)

    FileSystemRemoteStorageManager.delete_log_segment_data = delete_log_segment_data


if __name__ == "__main__":
    config, mode, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    {"meta": _arm_meta, "copy": _arm_copy, "expire": _arm_expire,
     "expire-rsm": _arm_expire_rsm}[mode](k)
    sys.exit(main(["run", "--config", config, "--until-idle"]))
