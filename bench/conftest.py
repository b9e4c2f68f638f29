"""Fixtures for the pytest-benchmark suite in this folder (bench_records.py).

    /work/venv/bin/python -m pytest bench/bench_records.py                  # 64 MiB segment
    /work/venv/bin/python -m pytest bench/bench_records.py --segment-mb 256 # the anchor's size
    /work/venv/bin/python -m pytest bench/bench_records.py -k "columns and zstd"

The segment size also follows ENGINE_BENCH_SEGMENT_MB / ENGINE_BENCH_ANCHOR=1 (see
bench/segment.py); ENGINE_BENCH_CACHE=<dir> keeps generated segments between runs.
"""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's spinning BLAS threads skew timings

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


def pytest_addoption(parser):
    group = parser.getgroup("engine-bench")
    group.addoption("--segment-mb", type=float, default=None,
                    help="uncompressed size of the benchmark segment in MiB "
                         "(default: ENGINE_BENCH_SEGMENT_MB or 64; 256 is the anchor's)")
    group.addoption("--bench-rounds", type=int, default=3,
                    help="timed rounds per benchmark (each round is a full segment pass)")


@pytest.fixture(scope="session")
def segment_total_bytes(request) -> int:
    from bench.segment import segment_bytes

    mb = request.config.getoption("--segment-mb")
    return segment_bytes() if mb is None else int(mb * (1 << 20))


@pytest.fixture(scope="session")
def segments(segment_total_bytes):
    """codec name -> segment bytes (generated on first use, then memoized)."""
    from bench.segment import CODECS, segment

    class _Lazy(dict):
        def __missing__(self, codec):
            assert codec in CODECS, codec
            self[codec] = data = segment(codec, segment_total_bytes)
            return data

    return _Lazy()


@pytest.fixture(scope="session")
def record_count(segments) -> int:
    from engine.records import scan_batches

    return int(scan_batches(segments["none"], verify_crc=False).headers["record_count"].sum())


@pytest.fixture
def run(benchmark, request):
    """run(fn, **extra): times fn over --bench-rounds full rounds (after one warm-up) and
    stores `extra` (records, bytes) in the report so throughput can be derived."""
    rounds = request.config.getoption("--bench-rounds")

    def _run(fn, **extra):
        benchmark.extra_info.update(extra)
        return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)

    return _run
