"""Child process of tests/test_objectstore_crash.py: `python -m engine run --until-idle` on
the object-store tier that kills itself with SIGKILL at its K-th object write or delete.

    objectstore_crash_driver.py CONFIG upload K   # K-th object upload (.log, .indexes or
                                                  # manifest): half its bytes streamed
    objectstore_crash_driver.py CONFIG delete K   # K-th batched delete of a segment's
                                                  # objects, before it is sent

The uploads and deletes are the real ones of engine.remote.objectstore.store.ObjectStore,
wrapped so the kill lands inside them: an upload stops after half its source was handed to
the client (a multipart upload in progress, or a PUT never sent), a delete never reaches
the store. Kills at random times are done by the test on `python -m engine run` itself.
"""

from __future__ import annotations

import os
import signal
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.cli import main
from engine.remote.objectstore.store import ObjectStore


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _halves(source):
    """The source's blocks, dying once half of them went out."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            data = f.read()
        blocks = [data[:len(data) // 2], data[len(data) // 2:]]
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        blocks = [data[:len(data) // 2], data[len(data) // 2:]]
    else:
        blocks = list(source)
    for i, block in enumerate(blocks):
        if i >= max(1, len(blocks) // 2):
            _die()
        yield block
    _die()


def _arm_upload(k: int) -> None:
    original = ObjectStore.upload
    calls = [0]

    def upload(self, key, source, **kwargs):
        calls[0] += 1
        if calls[0] == k:
            return original(self, key, _halves(source), **kwargs)
        return original(self, key, source, **kwargs)

    ObjectStore.upload = upload


def _arm_delete(k: int) -> None:
    original = ObjectStore.delete
    calls = [0]

    def delete(self, keys):
        calls[0] += 1
        if calls[0] == k:
            _die()
        return original(self, keys)

    ObjectStore.delete = delete


if __name__ == "__main__":
    config, mode, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    {"upload": _arm_upload, "delete": _arm_delete}[mode](k)
    sys.exit(main(["run", "--config", config, "--until-idle"]))
