"""pytest-benchmark suite for the record paths (the same workloads as compare_records.py).

    /work/venv/bin/python -m pytest bench/bench_records.py --benchmark-columns=median,ops
    /work/venv/bin/python -m pytest bench/bench_records.py --segment-mb 16 -k scan

Each benchmark is a full pass over a generated segment (bench/segment.py); `extra_info`
holds the records and bytes of the pass, so records/s = records / median. Groups put the
engine next to the peers it is measured against. For ratios measured in one process and
one run (what the targets are about) use compare_records.py.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench import compare_records as w
from bench.segment import CODECS, codec_id
from engine.records import MemoryRecords

COMPRESSED = [c for c in CODECS if c != "none"]


# ---- (i) validate-scan of the uncompressed segment ------------------------------------------

SCANNERS = {
    "engine-scan_batches-verify": w.engine_validate_scan,
    "engine-crc32c-one-call": lambda buf: w.engine_crc32c()[0](buf),
    "crc32c-package-one-call": lambda buf: __import__("crc32c").crc32c(buf),
    "kafka-python-crc-walk": w.kafka_python_crc_walk,
    "aiokafka-crc-walk": w.aiokafka_crc_walk,
}


@pytest.mark.parametrize("impl", list(SCANNERS))
def test_validate_scan(run, benchmark, segments, impl):
    benchmark.group = "i validate-scan (uncompressed)"
    buf = segments["none"]
    fn = SCANNERS[impl]
    run(lambda: fn(buf), bytes=len(buf))


# ---- (ii) decode to Python records -----------------------------------------------------------

DECODERS = {
    "engine": w.engine_decode_records,
    "engine-decompress-ahead": lambda buf: w.engine_decode_records(buf, decompress_ahead=2),
    "aiokafka": w.aiokafka_decode_records,
    "kafka-python": w.kafka_python_decode_records,
}


@pytest.mark.parametrize("impl", list(DECODERS))
@pytest.mark.parametrize("codec", CODECS)
def test_decode_records(run, benchmark, segments, record_count, codec, impl):
    benchmark.group = f"ii records {codec}"
    buf = segments[codec]
    fn = DECODERS[impl]
    assert fn(buf) == record_count
    run(lambda: fn(buf), records=record_count, bytes=len(buf))


# ---- (iii) columnar decode and the codec libraries' raw speed ----------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_decode_columns(run, benchmark, segments, record_count, codec):
    benchmark.group = f"iii columns {codec}"
    buf = segments[codec]
    assert w.engine_decode_columns(buf) == record_count
    run(lambda: w.engine_decode_columns(buf), records=record_count, bytes=len(buf))


needs_chunks = pytest.mark.skipif(not w.HAS_CHUNKS,
                                  reason="this engine has no MemoryRecords.decode_column_chunks")


@needs_chunks
@pytest.mark.parametrize("codec", CODECS)
def test_decode_column_chunks(run, benchmark, segments, record_count, codec):
    benchmark.group = f"iii columns {codec}"
    buf = segments[codec]
    assert w.engine_decode_column_chunks(buf, 1) == record_count
    run(lambda: w.engine_decode_column_chunks(buf, 1), records=record_count, bytes=len(buf))


@pytest.mark.parametrize("codec", COMPRESSED)
def test_raw_decompression(run, benchmark, segments, record_count, codec):
    benchmark.group = f"iii columns {codec}"
    cid = codec_id(codec)
    payloads, _, out_bytes = w.prepared_payloads(segments[codec], cid)
    fn, label = w.raw_decompressor(cid)
    benchmark.extra_info["library"] = label
    run(lambda: w.raw_decompress_all(fn, payloads), records=record_count,
        decompressed_bytes=out_bytes)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_engine_decompress(run, benchmark, segments, codec):
    benchmark.group = f"iii columns {codec}"
    buf = segments[codec]
    run(lambda: w.engine_decompress_all(buf, codec_id(codec)), bytes=len(buf))


# ---- (iv) threads -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(4) as p:
        yield p


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("codec", CODECS)
def test_decode_columns_threads(run, benchmark, segments, record_count, pool, codec, threads):
    benchmark.group = f"iv threads {codec}"
    m = MemoryRecords(segments[codec])
    m.scan()
    assert w.engine_columns_threaded(m, threads, pool) == record_count
    run(lambda: w.engine_columns_threaded(m, threads, pool), records=record_count,
        threads=threads, cpus=os.cpu_count())


@needs_chunks
@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("codec", CODECS)
def test_decode_column_chunks_threads(run, benchmark, segments, record_count, codec, threads):
    benchmark.group = f"iv threads {codec}"
    buf = segments[codec]
    assert w.engine_decode_column_chunks(buf, threads) == record_count
    run(lambda: w.engine_decode_column_chunks(buf, threads), records=record_count,
        threads=threads, cpus=os.cpu_count())
