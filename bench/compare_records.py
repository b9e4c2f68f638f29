"""Side by side: the engine's record paths against the peers, in one process, on one segment.

    /work/venv/bin/python bench/compare_records.py                # 64 MiB segment
    /work/venv/bin/python bench/compare_records.py --anchor       # the anchor's 256 MiB
    /work/venv/bin/python bench/compare_records.py --mb 16 --markdown /tmp/records.md

Every comparison runs its contenders round-robin (A B C A B C ...) and takes medians, so
they share whatever load the machine has. Noise between runs is about +-25% (more when
other jobs run), so only ratios measured in one run mean anything. Sections (targets from
the team's brief):
  (i)   validate-scan of the uncompressed segment (scan_batches(verify_crc=True)) vs the
        engine's own CRC32C over the same bytes and vs kafka-python's CRC-only walk.
        Targets: >= 0.8x our CRC32C, >= 2x kafka-python's walk.
  (ii)  decode to Python records (offset, timestamp, key and value of each touched, every
        CRC checked) per codec: engine vs aiokafka (compiled) vs kafka-python. When the
        engine's records() can decompress ahead on a thread pool, that variant is reported
        too. Target: >= 2x aiokafka for every codec.
  (iii) columnar decode (decode_columns, CRCs checked) records/s per codec vs aiokafka's
        records/s, and vs the codec library's raw decompression of the same batches'
        payloads (the ceiling for compressed data).
        Targets: >= 10x aiokafka uncompressed; >= 0.9x raw decompression when compressed.
  (iv)  columnar decode over disjoint batch ranges on 1, 2 and 4 threads (GIL released?).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# numpy's OpenBLAS threads spin after numpy calls and steal CPU from the thread sweep
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench.segment import ANCHOR_MB, CODECS, codec_id, segment, segment_bytes
from engine.records import MemoryRecords, decompress, scan_batches

# ---- the peers and reference libraries -----------------------------------------------------


def engine_crc32c():
    """(function, label) of the engine's own CRC32C, or of the `crc32c` package as a labelled
    stand-in while `engine._native.crc` is not built."""
    try:
        from engine._native import crc as _crc  # type: ignore[attr-defined]

        return _crc.crc32c, "engine._native.crc.crc32c"
    except ImportError:
        import crc32c

        return crc32c.crc32c, "crc32c package (STAND-IN: engine._native.crc not built)"


def aiokafka_modules():
    import aiokafka.record.default_records as d
    import aiokafka.record.memory_records as m

    compiled = m.MemoryRecords.__module__.startswith("aiokafka.record._crecords")
    compiled &= d.DefaultRecordBatch.__module__.startswith("aiokafka.record._crecords")
    return m, compiled


# ---- workloads (shared with bench_records.py) --------------------------------------------


def engine_validate_scan(buf) -> int:
    scan = scan_batches(buf, verify_crc=True)
    if not scan.headers["crc_valid"].all():
        raise AssertionError("bad CRC in the benchmark segment")
    return len(scan)


def kafka_python_crc_walk(buf) -> int:
    from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

    m = KpMemoryRecords(buf)
    n = 0
    while m.has_next():
        if not m.next_batch().validate_crc():
            raise AssertionError("kafka-python rejects a CRC")
        n += 1
    return n


def aiokafka_crc_walk(buf) -> int:
    mod, _ = aiokafka_modules()
    m = mod.MemoryRecords(buf)
    n = 0
    while m.has_next():
        if not m.next_batch().validate_crc():
            raise AssertionError("aiokafka rejects a CRC")
        n += 1
    return n


def _records_takes(name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(MemoryRecords.records).parameters
    except (TypeError, ValueError):
        return False


def engine_decode_records(buf, **options) -> int:
    """MemoryRecords.records() with every CRC checked: per batch when records() does it
    (its default), else by validate() first. `options` go to records() (for instance
    decompress_ahead=0 for a single-threaded run) when it takes them."""
    m = MemoryRecords(buf)
    if _records_takes("verify_crc"):
        options = {k: v for k, v in options.items() if _records_takes(k)}
        it = m.records(verify_crc=True, **options)
    else:
        m.validate()  # every CRC, in the nogil scan
        it = m.records()
    n = 0
    for r in it:
        _ = r.offset, r.timestamp, r.key, r.value
        n += 1
    return n


def aiokafka_decode_records(buf) -> int:
    mod, _ = aiokafka_modules()
    m = mod.MemoryRecords(buf)
    n = 0
    while m.has_next():
        batch = m.next_batch()
        if not batch.validate_crc():
            raise AssertionError("aiokafka rejects a CRC")
        for r in batch:
            _ = r.offset, r.timestamp, r.key, r.value
            n += 1
    return n


def kafka_python_decode_records(buf) -> int:
    from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

    m = KpMemoryRecords(buf)
    n = 0
    while m.has_next():
        batch = m.next_batch()
        if not batch.validate_crc():
            raise AssertionError("kafka-python rejects a CRC")
        for r in batch:
            _ = r.offset, r.timestamp, r.key, r.value
            n += 1
    return n


def engine_decode_columns(buf) -> int:
    return len(MemoryRecords(buf).decode_columns(verify_crc=True))


HAS_CHUNKS = hasattr(MemoryRecords, "decode_column_chunks")


def engine_decode_column_chunks(buf, threads: int) -> int:
    """MemoryRecords.decode_column_chunks (runs of ~8 MiB of batches, decoded on `threads`
    threads), when the engine has it."""
    chunks = MemoryRecords(buf).decode_column_chunks(threads=threads, verify_crc=True)
    return sum(len(c) for c in chunks)


def batch_payloads(buf) -> tuple[list, list[int], int]:
    """(records-section payloads, codec per batch, total records) of every v2 batch."""
    h = scan_batches(buf, verify_crc=False).headers
    mv = memoryview(buf)
    payloads = [mv[p + 61:p + s] for p, s in zip(h["position"].tolist(), h["size"].tolist())]
    return payloads, h["compression"].tolist(), int(h["record_count"].sum())


def raw_decompressor(codec: int, library: str = "engine"):
    """A function payload -> decompressed bytes using the codec library directly (no Kafka
    framing checks). `library` picks zlib or ISA-L for gzip ("engine" = what the engine
    uses). Snappy payloads are xerial-framed: the chunks are split once, outside timing."""
    if codec == 1:
        if library == "zlib":
            import zlib

            return lambda p: zlib.decompress(p, 31), "zlib"
        try:
            from isal import isal_zlib
        except ImportError:  # pragma: no cover - the engine falls back to zlib too
            import zlib as isal_zlib
        return lambda p: isal_zlib.decompress(p, 31), "isal_zlib"
    if codec == 2:
        import cramjam

        raw = cramjam.snappy.decompress_raw
        return (lambda chunks: [raw(c) for c in chunks]), "cramjam.snappy raw (per xerial chunk)"
    if codec == 3:
        import lz4.frame

        return lz4.frame.decompress, "lz4.frame"
    if codec == 4:
        import zstandard

        d = zstandard.ZstdDecompressor()
        return d.decompress, "zstandard (reused context)"
    raise ValueError(codec)


def xerial_chunks(payload) -> list:
    mv = memoryview(payload)
    pos, out = 16, []
    while pos < len(mv):
        n = int.from_bytes(mv[pos:pos + 4], "big")
        out.append(mv[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out


def prepared_payloads(buf, codec: int) -> tuple[list, int, int]:
    """(inputs for raw_decompressor, records, decompressed bytes)."""
    payloads, codecs, records = batch_payloads(buf)
    assert all(c == codec for c in codecs)
    if codec == 2:
        payloads = [xerial_chunks(p) for p in payloads]
    fn, _ = raw_decompressor(codec)
    out_bytes = 0
    for p in payloads:
        r = fn(p)
        out_bytes += sum(len(x) for x in r) if codec == 2 else len(r)
    return payloads, records, out_bytes


def raw_decompress_all(fn, payloads) -> int:
    for p in payloads:
        fn(p)
    return len(payloads)


def engine_decompress_all(buf, codec: int) -> int:
    payloads, _, _ = batch_payloads(buf)
    for p in payloads:
        decompress(codec, p)
    return len(payloads)


def engine_columns_threaded(m: MemoryRecords, threads: int, pool: ThreadPoolExecutor) -> int:
    n = len(m.scan())
    bounds = np.linspace(0, n, threads + 1).astype(int).tolist()
    futs = [pool.submit(m.decode_columns, bounds[i], bounds[i + 1], verify_crc=True)
            for i in range(threads)]
    return sum(len(f.result()) for f in futs)


# ---- timing and reporting ------------------------------------------------------------------


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = CLOCKS["wall"]


def measure_group(fns: dict, repeat: int, warmup: int = 1, clock=None) -> dict:
    """Median seconds of each function, the functions run round-robin (A B C A B C ..) so
    that they share whatever load the machine has; GC off while timing. `clock` defaults to
    the --clock choice: wall time, or the process's CPU time (all its threads), which
    other jobs on a busy machine disturb much less."""
    clock = clock or CLOCK
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {k: [] for k in fns}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for k, fn in fns.items():
                t0 = clock()
                fn()
                times[k].append(clock() - t0)
                gc.collect()
    finally:
        if gc_was:
            gc.enable()
    return {k: statistics.median(v) for k, v in times.items()}


class Report:
    def __init__(self):
        self.rows: list[tuple[str, str, float, str]] = []
        self.ratios: list[tuple[str, float, float | None, str]] = []
        self.notes: list[str] = []

    def add(self, section, what, value, unit):
        self.rows.append((section, what, value, unit))
        print(f"  {section:<6} {what:<58} {_fmt(value):>12} {unit}", flush=True)

    def ratio(self, what, value, target=None, note=""):
        self.ratios.append((what, value, target, note))
        verdict = "" if target is None else ("MET" if value >= target else "MISSED")
        tgt = "" if target is None else f">= {target:g}x"
        print(f"  ratio  {what:<58} {value:>11.3g}x {tgt:>8} {verdict}", flush=True)

    def text_tables(self) -> str:
        out = [f"{'sect':<6} {'measurement':<58} {'value':>12} unit"]
        out += [f"{s:<6} {w:<58} {_fmt(v):>12} {u}" for s, w, v, u in self.rows]
        out += ["", f"{'ratio':<64} {'measured':>9} {'target':>9} verdict"]
        for w, v, t, note in self.ratios:
            verdict = "" if t is None else ("MET" if v >= t else "MISSED")
            tgt = "" if t is None else f">= {t:g}x"
            out.append(f"{w:<64} {v:>8.3g}x {tgt:>9} {verdict} {note}".rstrip())
        return "\n".join(out)

    def markdown(self, header: list[str]) -> str:
        out = header + ["", "| section | measurement | value | unit |", "|---|---|---:|---|"]
        out += [f"| {s} | {w} | {_fmt(v)} | {u} |" for s, w, v, u in self.rows]
        out += ["", "| ratio | measured | target | verdict |", "|---|---:|---:|---|"]
        for w, v, t, note in self.ratios:
            verdict = "" if t is None else ("met" if v >= t else "**missed**")
            if note:
                verdict = f"{verdict} ({note})" if verdict else note
            out.append(f"| {w} | {v:.3g}x | {'' if t is None else f'>= {t:g}x'} | {verdict} |")
        if self.notes:
            out += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(out) + "\n"


def _fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def environment() -> list[str]:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import aiokafka
    import kafka

    _, compiled = aiokafka_modules()
    kind = "compiled _crecords" if compiled else "PURE PYTHON fallback"
    return [f"CPU: {cpu}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}",
            f"kafka-python {kafka.__version__}; aiokafka {aiokafka.__version__} ({kind})"]


# ---- the run -------------------------------------------------------------------------------


def run(args) -> Report:
    rep = Report()
    total = (ANCHOR_MB << 20) if args.anchor else (
        int(args.mb * (1 << 20)) if args.mb else segment_bytes())
    codecs = [CODECS[codec_id(c)] for c in args.codecs.split(",")]
    env = environment()
    rep.env = env
    env.append(f"timer: {args.clock} time for sections i-iii, wall time for iv; "
               f"median of {args.repeat} round-robin runs")
    try:
        env.append(f"load average at start: {os.getloadavg()[0]:.2f}")
    except OSError:
        pass
    for line in env:
        print(line)
    print(f"generating segments of ~{total >> 20} MiB uncompressed ...", flush=True)
    t0 = time.perf_counter()
    segs = {c: segment(c, total) for c in dict.fromkeys(["none"] + codecs)}
    print(f"  done in {time.perf_counter() - t0:.1f} s", flush=True)
    h = scan_batches(segs["none"], verify_crc=False).headers
    nrec = int(h["record_count"].sum())
    for c, buf in segs.items():
        rep.notes.append(f"segment {c}: {len(buf) / 1e6:.1f} MB, {len(h)} batches, "
                         f"{nrec} records")
    R = args.repeat

    sections = set(args.sections.split(","))
    ak_rate = {}

    if "i" in sections:
        _section_i(rep, segs, R)
    if "ii" in sections:
        _section_ii(rep, segs, codecs, nrec, R, ak_rate)
    if "iii" in sections:
        _section_iii(rep, segs, codecs, nrec, R, ak_rate)
    if "iv" in sections:
        _section_iv(rep, segs, codecs, nrec, R, args)
    try:
        rep.notes.append(f"load average at the end: {os.getloadavg()[0]:.2f} "
                         f"({os.cpu_count()} CPUs); other jobs inflate wall times")
    except OSError:
        pass
    return rep


def _section_i(rep, segs, R):
    print("(i) validate-scan of the uncompressed segment", flush=True)
    buf = segs["none"]
    gb = len(buf) / 1e9
    crc_fn, crc_label = engine_crc32c()
    import crc32c

    group = {
        "scan": lambda: engine_validate_scan(buf),
        "frame": lambda: scan_batches(buf, verify_crc=False),
        "ours": lambda: crc_fn(buf),
        "pkg": lambda: crc32c.crc32c(buf),
        "kp": lambda: kafka_python_crc_walk(buf),
        "ak": lambda: aiokafka_crc_walk(buf),
    }
    try:
        import google_crc32c

        group["google"] = lambda: google_crc32c.value(buf)
    except ImportError:
        rep.notes.append("google-crc32c not installed")
    t = measure_group(group, R)
    rep.add("i", "engine scan_batches(verify_crc=True)", gb / t["scan"], "GB/s")
    rep.add("i", "engine scan_batches(verify_crc=False) (framing only)", gb / t["frame"], "GB/s")
    rep.add("i", f"our CRC32C, one call: {crc_label}", gb / t["ours"], "GB/s")
    rep.add("i", "crc32c package, one call", gb / t["pkg"], "GB/s")
    if "google" in t:
        rep.add("i", "google-crc32c, one call", gb / t["google"], "GB/s")
    rep.add("i", "kafka-python walk, validate_crc() per batch", gb / t["kp"], "GB/s")
    rep.add("i", "aiokafka (compiled) walk, validate_crc() per batch", gb / t["ak"], "GB/s")
    rep.ratio("scan vs our CRC32C" + ("" if crc_label.startswith("engine") else " (stand-in)"),
              t["ours"] / t["scan"], 0.8)
    rep.ratio("scan vs kafka-python CRC walk", t["kp"] / t["scan"], 2.0)
    rep.ratio("scan vs aiokafka CRC walk", t["ak"] / t["scan"])



def _section_ii(rep, segs, codecs, nrec, R, ak_rate):
    pool_variant = _records_takes("decompress_ahead")
    ahead = 2 * max(1, (os.cpu_count() or 2) - 1)
    print("(ii) decode to Python records (CRC checked; offset, timestamp, key, value touched)",
          flush=True)
    for c in codecs:
        b = segs[c]
        group = {"engine": lambda b=b: engine_decode_records(b),
                 "ak": lambda b=b: aiokafka_decode_records(b),
                 "kp": lambda b=b: kafka_python_decode_records(b)}
        pooled = pool_variant and c != "none"
        if pooled:
            group["pool"] = lambda b=b: engine_decode_records(b, decompress_ahead=ahead)
        t = measure_group(group, R)
        ak_rate[c] = nrec / t["ak"]
        rep.add("ii", f"{c}: engine MemoryRecords.records()", nrec / t["engine"], "records/s")
        if pooled:
            rep.add("ii", f"{c}: engine records(decompress_ahead={ahead}), pool threads",
                    nrec / t["pool"], "records/s")
        rep.add("ii", f"{c}: aiokafka compiled", nrec / t["ak"], "records/s")
        rep.add("ii", f"{c}: kafka-python", nrec / t["kp"], "records/s")
        rep.ratio(f"{c}: records, engine vs aiokafka", t["ak"] / t["engine"], 2.0)
        if pooled:
            rep.ratio(f"{c}: records, engine decompress_ahead={ahead} vs aiokafka",
                      t["ak"] / t["pool"], 2.0)
        rep.ratio(f"{c}: records, engine vs kafka-python", t["kp"] / t["engine"])


def _section_iii(rep, segs, codecs, nrec, R, ak_rate):
    print("(iii) columnar decode vs aiokafka and vs raw decompression", flush=True)
    for c in codecs:
        b = segs[c]
        group = {"cols": lambda b=b: engine_decode_columns(b)}
        if HAS_CHUNKS:
            group["chunks"] = lambda b=b: engine_decode_column_chunks(b, 1)
        cid = codec_id(c)
        if cid:
            payloads, _, out_bytes = prepared_payloads(b, cid)
            fn, label = raw_decompressor(cid)
            group["raw"] = lambda fn=fn, p=payloads: raw_decompress_all(fn, p)
            group["wrap"] = lambda b=b, cid=cid: engine_decompress_all(b, cid)
            if cid == 1:
                zfn, zlabel = raw_decompressor(cid, "zlib")
                group["zlib"] = lambda zfn=zfn, p=payloads: raw_decompress_all(zfn, p)
        t = measure_group(group, R)
        rep.add("iii", f"{c}: engine decode_columns()", nrec / t["cols"], "records/s")
        rep.add("iii", f"{c}: engine decode_columns() input", len(b) / t["cols"] / 1e6, "MB/s")
        if "chunks" in t:
            rep.add("iii", f"{c}: engine decode_column_chunks(threads=1)", nrec / t["chunks"],
                    "records/s")
        if c not in ak_rate:  # section ii skipped: measure aiokafka here
            ak_rate[c] = nrec / measure_group({"ak": lambda b=b: aiokafka_decode_records(b)},
                                              R)["ak"]
        if not cid:
            rep.ratio("none: columnar vs aiokafka records/s", nrec / t["cols"] / ak_rate[c], 10.0)
            if "chunks" in t:
                rep.ratio("none: column chunks (1 thread) vs aiokafka records/s",
                          nrec / t["chunks"] / ak_rate[c], 10.0)
            continue
        rep.ratio(f"{c}: columnar vs aiokafka records/s", nrec / t["cols"] / ak_rate[c])
        rep.add("iii", f"{c}: raw {label}", out_bytes / t["raw"] / 1e6, "MB/s out")
        rep.add("iii", f"{c}: raw {label}, as records", nrec / t["raw"], "records/s")
        if "zlib" in t:
            rep.add("iii", f"{c}: raw {zlabel} (reference)", out_bytes / t["zlib"] / 1e6,
                    "MB/s out")
        rep.add("iii", f"{c}: engine.records.decompress() per batch", out_bytes / t["wrap"] / 1e6,
                "MB/s out")
        rep.ratio(f"{c}: columnar vs raw decompression ({label})", t["raw"] / t["cols"], 0.9)
        if "chunks" in t:
            rep.ratio(f"{c}: column chunks (1 thread) vs raw decompression",
                      t["raw"] / t["chunks"], 0.9)
        rep.ratio(f"{c}: engine decompress() vs raw ({label})", t["raw"] / t["wrap"])



def _section_iv(rep, segs, codecs, nrec, R, args):
    print("(iv) columnar decode on 1/2/4 threads over disjoint batch ranges", flush=True)
    thread_counts = [int(x) for x in args.threads.split(",")]
    with ThreadPoolExecutor(max(thread_counts)) as pool:
        for c in codecs:
            m = MemoryRecords(segs[c])
            m.scan()
            group = {n: (lambda n=n, m=m: engine_columns_threaded(m, n, pool))
                     for n in thread_counts}
            if HAS_CHUNKS:
                group.update({
                    ("chunks", n): (lambda n=n, b=segs[c]: engine_decode_column_chunks(b, n))
                    for n in thread_counts})
            t = measure_group(group, R, clock=time.perf_counter)  # wall time, always
            base = thread_counts[0]
            for n in thread_counts:
                rep.add("iv", f"{c}: decode_columns on {n} thread(s), disjoint ranges",
                        nrec / t[n], "records/s")
                if n != base:
                    rep.ratio(f"{c}: {n} threads vs {base}", t[base] / t[n],
                              note=f"{os.cpu_count()} CPUs")
            if HAS_CHUNKS:
                for n in thread_counts:
                    rep.add("iv", f"{c}: decode_column_chunks(threads={n})",
                            nrec / t[("chunks", n)], "records/s")
                    if n != base:
                        rep.ratio(f"{c}: column chunks, {n} threads vs {base}",
                                  t[("chunks", base)] / t[("chunks", n)],
                                  note=f"{os.cpu_count()} CPUs")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=None,
                   help="uncompressed segment MiB (default: ENGINE_BENCH_SEGMENT_MB or 64)")
    p.add_argument("--anchor", action="store_true", help="the anchor's 256 MiB segment")
    p.add_argument("--codecs", default=",".join(CODECS))
    p.add_argument("--repeat", type=int, default=5,
                   help="timed runs of each measurement (round-robin within a group)")
    p.add_argument("--threads", default="1,2,4")
    p.add_argument("--sections", default="i,ii,iii,iv", help="which sections to run")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="timer for sections i-iii (iv always uses wall time): wall, or cpu "
                        "= process CPU time of all threads, robust when other jobs load the "
                        "machine")
    p.add_argument("--markdown", metavar="FILE", help="also write the tables as markdown")
    args = p.parse_args(argv)
    global CLOCK
    CLOCK = CLOCKS[args.clock]
    rep = run(args)
    print()
    print(rep.text_tables())
    for n in rep.notes:
        print("note:", n)
    if args.markdown:
        header = ["# Record paths: engine vs peers (one process, one segment)", ""]
        header += [f"- {line}" for line in rep.env]
        command = " ".join(["compare_records.py"] + (argv if argv is not None else sys.argv[1:]))
        header.append(f"- command: `{command}`")
        with open(args.markdown, "w") as f:
            f.write(rep.markdown(header))
        print(f"markdown written to {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
