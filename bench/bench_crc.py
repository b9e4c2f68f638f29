"""pytest-benchmark: CRC-32C of the engine against the `crc32c` and `google_crc32c` packages.

    /work/venv/bin/python -m pytest bench/bench_crc.py --benchmark-min-time=0.02
    /work/venv/bin/python -m pytest bench/bench_crc.py -k "not 256MiB"     # skip the big one

A 1 KiB call takes well under a microsecond: with pytest-benchmark's default minimum round
time (5 us) its figures are quantised by the timer, hence --benchmark-min-time=0.02.

Buffers are 1 KiB, 64 KiB, 1 MiB and 256 MiB of non-zero bytes (a zero-filled `bytes(n)` may
be backed by the kernel's shared zero page and measure the cache instead of memory). For
side-by-side GB/s, ratios, ISA-L and thread scaling in one run, see bench/compare_crc.py.
"""

import os
import random
import sys

import pytest

if __package__ in (None, ""):  # run from anywhere: make `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine import checksums

SIZES = {"1KiB": 1 << 10, "64KiB": 64 << 10, "1MiB": 1 << 20, "256MiB": 256 << 20}
_SEED = random.Random(1).randbytes(1 << 20)


def _contenders():
    found = {"engine": checksums.crc32c}
    try:
        import crc32c

        found["crc32c"] = crc32c.crc32c
    except ImportError:
        pass
    try:
        import google_crc32c

        found["google_crc32c"] = google_crc32c.value
    except ImportError:
        pass
    return found


CONTENDERS = _contenders()
_BUFFERS = {}


def _buffer(size):
    if size not in _BUFFERS:
        _BUFFERS[size] = _SEED[:size] if size <= len(_SEED) else _SEED * (size // len(_SEED))
    return _BUFFERS[size]


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
@pytest.mark.parametrize("who", list(CONTENDERS))
def test_crc32c(benchmark, who, size):
    data = _buffer(SIZES[size])
    fn = CONTENDERS[who]
    benchmark.group = f"crc32c {size}"
    benchmark.extra_info["bytes"] = len(data)
    result = benchmark(fn, data)
    assert result == checksums.crc32c(data)
