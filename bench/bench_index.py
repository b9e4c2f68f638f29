"""pytest-benchmark: offset-index lookups of the engine against `bisect` and numpy.

    /work/venv/bin/python -m pytest bench/bench_index.py --benchmark-group-by=group
    /work/venv/bin/python bench/bench_index.py          # ratios from one interleaved run

The index is a real mmap'd `OffsetIndex` of 262,144 entries (2 MiB). Single lookups go one
at a time from a Python loop, against `bisect.bisect_right` on a Python list of the offsets
(plus the position list, so both return an entry). Batched lookups take 100,000 random
targets at once: entries (`lookup_many`) against `numpy.searchsorted` on an int64 array plus
the gather of offsets and positions, and slots alone (`slots_for`) against `searchsorted`
alone. Every contender gets the same seeded targets; results are checked equal first.

Machine noise here is about +-25% between runs: compare ratios from one run, not absolute
numbers across runs.
"""

import bisect
import os
import sys
import tempfile
import timeit

import numpy as np
import pytest

if __package__ in (None, ""):  # run from anywhere: make `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.log import OffsetIndex

ENTRIES = 262_144
SINGLE_TARGETS = 10_000
BATCH_TARGETS = 100_000
BASE_OFFSET = 1_000_000


class Fixture:
    """The index file, its Python-list and numpy twins, and the targets."""

    def __init__(self, directory):
        rng = np.random.default_rng(2024)
        relative = np.cumsum(rng.integers(1, 200, ENTRIES)).astype(np.int64)  # ~100-record batches
        positions = np.cumsum(rng.integers(4097, 6000, ENTRIES)).astype(np.int64) % (2**31)
        positions.sort()
        raw = np.empty(ENTRIES, dtype=[("r", ">i4"), ("p", ">i4")])
        raw["r"], raw["p"] = relative, positions
        path = os.path.join(directory, f"{BASE_OFFSET:020d}.index")
        with open(path, "wb") as f:
            f.write(raw.tobytes())
        self.index = OffsetIndex(path, BASE_OFFSET, writable=False)
        self.offsets = relative + BASE_OFFSET
        self.positions = positions
        self.offset_list = self.offsets.tolist()
        self.position_list = self.positions.tolist()
        span = (BASE_OFFSET - 10, int(self.offsets[-1]) + 10)
        self.single = rng.integers(*span, SINGLE_TARGETS).tolist()
        self.batch = rng.integers(*span, BATCH_TARGETS)

    def engine_single(self):
        lookup = self.index.lookup
        return [lookup(t) for t in self.single]

    def bisect_single(self):
        find, keys, positions = bisect.bisect_right, self.offset_list, self.position_list
        out = []
        for t in self.single:
            i = find(keys, t) - 1
            out.append((keys[i], positions[i]) if i >= 0 else (BASE_OFFSET, 0))
        return out

    def engine_batch(self):
        return self.index.lookup_many(self.batch)

    def engine_slots(self):
        return self.index.slots_for(self.batch)

    def numpy_slots(self):
        return np.searchsorted(self.offsets, self.batch, side="right") - 1

    def numpy_batch(self):
        slots = np.searchsorted(self.offsets, self.batch, side="right") - 1
        found = slots >= 0
        safe = np.maximum(slots, 0)
        return (np.where(found, self.offsets[safe], BASE_OFFSET),
                np.where(found, self.positions[safe], 0))

    def check(self):
        assert self.engine_single() == self.bisect_single()
        for a, b in zip(self.engine_batch(), self.numpy_batch()):
            assert (a == b).all()
        assert (self.engine_slots() == self.numpy_slots()).all()


@pytest.fixture(scope="module")
def fixture():
    with tempfile.TemporaryDirectory() as directory:
        f = Fixture(directory)
        f.check()
        yield f
        f.index.close()


@pytest.mark.parametrize("who", ["engine", "bisect"])
def test_single_lookup(benchmark, fixture, who):
    benchmark.group = f"offset index: {SINGLE_TARGETS} single lookups over {ENTRIES} entries"
    benchmark.extra_info["lookups"] = SINGLE_TARGETS
    benchmark(fixture.engine_single if who == "engine" else fixture.bisect_single)


@pytest.mark.parametrize("who", ["engine", "searchsorted"])
def test_batched_lookup(benchmark, fixture, who):
    benchmark.group = f"offset index: {BATCH_TARGETS} entries in one call over {ENTRIES} entries"
    benchmark.extra_info["lookups"] = BATCH_TARGETS
    benchmark(fixture.engine_batch if who == "engine" else fixture.numpy_batch)


@pytest.mark.parametrize("who", ["engine", "searchsorted"])
def test_batched_slots(benchmark, fixture, who):
    benchmark.group = f"offset index: {BATCH_TARGETS} slots in one call over {ENTRIES} entries"
    benchmark.extra_info["lookups"] = BATCH_TARGETS
    benchmark(fixture.engine_slots if who == "engine" else fixture.numpy_slots)


def _best_ns(fn, count, repeat=7):
    number = 3
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number / count * 1e9


def main():
    with tempfile.TemporaryDirectory() as directory:
        f = Fixture(directory)
        f.check()
        rows = []
        for _ in range(3):  # interleave the contenders so drift hits both
            rows.append((_best_ns(f.engine_single, SINGLE_TARGETS),
                         _best_ns(f.bisect_single, SINGLE_TARGETS),
                         _best_ns(f.engine_batch, BATCH_TARGETS),
                         _best_ns(f.numpy_batch, BATCH_TARGETS),
                         _best_ns(f.engine_slots, BATCH_TARGETS),
                         _best_ns(f.numpy_slots, BATCH_TARGETS)))
        f.index.close()
    (engine_single, bisect_single, engine_batch, numpy_batch, engine_slots,
     numpy_slots) = (min(col) for col in zip(*rows))
    print(f"offset index of {ENTRIES} entries, best of 3 interleaved rounds, ns per lookup")
    print(f"  single:          engine {engine_single:7.1f}   bisect              "
          f"{bisect_single:7.1f}   ratio {bisect_single / engine_single:5.1f}x")
    print(f"  batched entries: engine {engine_batch:7.1f}   searchsorted+gather "
          f"{numpy_batch:7.1f}   ratio {numpy_batch / engine_batch:5.1f}x")
    print(f"  batched slots:   engine {engine_slots:7.1f}   searchsorted        "
          f"{numpy_slots:7.1f}   ratio {numpy_slots / engine_slots:5.1f}x")


if __name__ == "__main__":
    main()
