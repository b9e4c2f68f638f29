"""CPU per GiB of the remote-partition readers through their public APIs, against a local
read of the same bytes in the same process: so that two trees (before and after a change to
the read path) can be compared on a shared machine, where wall-clock time measures the
neighbours. Only public calls are made, so the script runs on older trees too
(`PYTHONPATH=<tree> python <this file>`).

    python bench/compare_readers_cpu.py --mb 64 --rounds 5

Set-up: compare_remote_read's (bench/segment.py's uncompressed segment appended to the
tiered topic's 4 partitions and to a local topic, the filesystem tier with `full`
verification, the embedded RLMM), every inactive segment copied by RemoteLogManager.run_once.
Measures (process CPU seconds per GiB, every thread of the process; median and range of
`--rounds`):
- local: UnifiedLog.read of local-0, 1 MiB chunks (the yardstick);
- rlm: RemoteLogManager.read of tiered-0's remote offsets, the same chunks;
- arrow: engine.arrow.read_topic of the tiered topic's remote offsets (the broker's tier,
  the Spark source's planning and decoding), all columns, copied.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare_remote_read import PARTITIONS, Setup
from bench.segment import segment

MAX_BYTES = 1 << 20
GIB = 1 << 30


def _chunks(log, end: int) -> list[int]:
    starts, offset = [], 0
    while offset < end:
        starts.append(offset)
        _, offset = log.read(offset, MAX_BYTES)
    return starts


def _cpu_per_gib(fn) -> float:
    t0 = time.process_time()
    nbytes = fn()
    return (time.process_time() - t0) / (nbytes / GIB)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="readers-cpu-"))
    s = Setup(root, segment("none", args.mb << 20))
    try:
        rlm = s.new_rlm(2)
        tiered = [s.lm.get_log("tiered", p) for p in range(PARTITIONS)]
        while any(log.highest_offset_in_remote_storage < log.segments[-1].base_offset - 1
                  for log in tiered):
            rlm.run_once()
        # local copies deleted: every read of the tiered offsets is remote
        s.lm.update_topic_config("tiered", {"remote.storage.enable": "true",
                                            "segment.bytes": str(s.segment_bytes),
                                            "retention.ms": "-1",
                                            "local.retention.bytes": "1"})
        for log in tiered:
            log.delete_old_segments()
        rlm.run_once()
        local = s.lm.get_log("local", 0)
        end = tiered[0].local_log_start_offset
        starts = _chunks(local, end)

        def local_reads():
            return sum(local.read(o, MAX_BYTES)[0].nbytes for o in starts)

        def rlm_reads():
            total = 0
            for o in starts:
                got = rlm.read("tiered", 0, o, MAX_BYTES)
                assert got.from_remote
                total += memoryview(got.records).nbytes
            return total

        props = {**s.config_props, "rlmm.config.metadata.dir": str(root / "meta")}
        nbytes = local_reads()  # what the scan decodes: the same offsets' batches

        def arrow_reads():
            from engine.arrow import read_topic

            with read_topic("tiered", config=props, partitions=[0],
                            ending_offsets=end) as stream:
                stream.read_all()
            return nbytes

        results: dict[str, list[float]] = {"local": [], "rlm": [], "arrow": []}
        for _ in range(args.rounds):
            results["local"].append(_cpu_per_gib(local_reads))
            results["rlm"].append(_cpu_per_gib(rlm_reads))
            results["arrow"].append(_cpu_per_gib(arrow_reads))
        for name, values in results.items():
            values.sort()
            print(f"{name}: {values[len(values) // 2]:.3f} CPU-s/GiB "
                  f"({values[0]:.3f}-{values[-1]:.3f})")
        mid = {k: v[len(v) // 2] for k, v in results.items()}
        print(f"rlm/local: {mid['rlm'] / mid['local']:.2f}x  "
              f"arrow/local: {mid['arrow'] / mid['local']:.2f}x")
    finally:
        s.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
