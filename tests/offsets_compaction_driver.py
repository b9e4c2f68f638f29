"""The writer that tests/test_offsets_store_crash.py kills with SIGKILL (not a test module).

    python tests/offsets_compaction_driver.py STORE_DIR before-rename|after-rename

Commits offsets of partitions 0..6 of topic "t" to an OffsetsStore in STORE_DIR, printing
"acked <i>" once commit i returned (written and fsynced). At the first compaction it stops
at the given point (the new file written and fsynced but not yet renamed over the old one,
or renamed but the directory not yet fsynced), prints "paused" and sleeps until killed.
"""

from __future__ import annotations

import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.protocol import offsets_store
from engine.protocol.offsets_store import CommittedOffset, OffsetsStore

PARTITIONS = 7


def main() -> None:
    store_dir, when = sys.argv[1], sys.argv[2]
    real_replace = offsets_store.os.replace

    def pause(src, dst):
        if when == "after-rename":
            real_replace(src, dst)
        print("paused", flush=True)
        while True:
            time.sleep(60)

    offsets_store.os.replace = pause  # type: ignore[attr-defined]
    store = OffsetsStore(store_dir)
    i = 0
    while True:
        store.commit("g", {("t", i % PARTITIONS): CommittedOffset(i, 0, f"m{i}", i)})
        print(f"acked {i}", flush=True)
        i += 1


if __name__ == "__main__":
    main()
