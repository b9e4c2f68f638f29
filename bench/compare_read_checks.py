"""What the consumer-facing batch checks cost a read: RemoteLogManager.read of the same
offsets, local and remote, in this checkout or in another one (`--tree`, e.g. a worktree of
the commit before the checks), so that two trees can be run alternately under the same
conditions.

    .venv/bin/python bench/compare_read_checks.py                      # this checkout
    .venv/bin/python bench/compare_read_checks.py --tree /work/old     # another checkout

Set-up: bench/compare_remote_read.py's (the same batches at the same offsets in topic
`tiered`, every segment tiered to the filesystem tier with `log.read.verification=full` and
its local copy deleted, and in topic `local`, never tiered). Each row reads the whole
partition in 1 MiB reads and touches one byte per 4 KiB page of each answer ("every byte":
reads every byte, as a consumer decoding it does). Rows: UnifiedLog.read (no checks in
either tree), RemoteLogManager.read of `local` and of `tiered`, and
engine.rlm.reader.read_remote on the calling thread. Medians of `--repeat` round-robin runs,
by wall time and by the calling thread's CPU time (which other processes on a shared machine
disturb much less; the pooled remote read runs on another thread, so it has no CPU row).
One JSON line: MB/s per row and clock, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="checkout whose engine and bench are measured")
    parser.add_argument("--mb", type=int, default=64, help="MiB of records per partition")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    tree = os.path.abspath(args.tree)
    sys.path.insert(0, tree)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import bench.compare_log as timing
    import engine
    from bench.compare_remote_read import MAX_BYTES, Setup, _chunk_starts
    from bench.segment import segment
    from engine.rlm.reader import read_remote

    if not engine.__file__.startswith(tree):
        raise SystemExit(f"error: engine imported from {engine.__file__}, not {tree}")
    root = Path(tempfile.mkdtemp(prefix="read-checks-"))
    s = Setup(root, segment("none", args.mb << 20))
    try:
        rlm = s.new_rlm(1)
        s.lm.update_topic_config("tiered", {
            "remote.storage.enable": "true", "segment.bytes": str(s.segment_bytes),
            "retention.ms": "-1", "local.retention.bytes": "1"})
        for _ in range(10):  # bounded: each pass tiers what the last left
            rlm.run_once()
        s.lm.get_log("tiered", 0).delete_old_segments()
        rlm.run_once()
        tiered, local = s.lm.get_log("tiered", 0), s.lm.get_log("local", 0)
        st = rlm._partitions[("tiered", 0)]
        # the collaborators of a remote read: the RemoteLogReader where the tree has one,
        # else (older trees) the manager itself
        log_reader = getattr(rlm, "reader", rlm)
        starts = _chunk_starts(local, tiered.local_log_start_offset)
        nbytes = sum(local.read(o, MAX_BYTES)[0].nbytes for o in starts)
        if not rlm.read("tiered", 0, 0, MAX_BYTES).from_remote:
            raise SystemExit("error: the tiered partition's first read is not remote")
        touch, touch_all = timing.touch, timing.touch_all

        def rows(fn, t):
            return lambda: [t(fn(o)) for o in starts]

        fns = {
            "UnifiedLog.read (local)": rows(lambda o: local.read(o, MAX_BYTES)[0], touch),
            "RLM.read (local)": rows(lambda o: rlm.read("local", 0, o, MAX_BYTES).records,
                                     touch),
            "read_remote on the caller": rows(lambda o: read_remote(
                log_reader, st, o, MAX_BYTES, True, "read_uncommitted")[0], touch),
            "RLM.read (local), every byte": rows(
                lambda o: rlm.read("local", 0, o, MAX_BYTES).records, touch_all),
            "RLM.read (remote)": rows(lambda o: rlm.read("tiered", 0, o, MAX_BYTES).records,
                                      touch),
            "RLM.read (remote), every byte": rows(
                lambda o: rlm.read("tiered", 0, o, MAX_BYTES).records, touch_all),
        }
        out = {}
        for clock in ("wall", "cpu"):
            timing._clock = timing.CLOCK[clock]
            group = {k: v for k, v in fns.items() if clock == "wall" or "(remote)" not in k}
            t = timing.measure_group(group, args.repeat)
            out[clock] = {k: round(nbytes / v / 1e6) for k, v in t.items()}
        print(json.dumps({"tree": tree, "load": round(os.getloadavg()[0], 1), "MB/s": out}))
    finally:
        s.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
