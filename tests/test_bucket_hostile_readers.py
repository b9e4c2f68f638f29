"""Hostile buckets through the bucket readers, against a real S3 server (SeaweedFS): truncated
objects, lying manifests, 0-byte indexes and logs, flipped bytes and keys that do not parse are
clear errors or reported findings, never wrong rows and never a hang.

One bucket prefix holds every case, each as its own topic (partition 0) of three segments:
offsets 0-9 and 70-79 are good, 10-69 carries the damage (or, for the keys that do not parse,
all three are good and junk keys with a ghost segment's bytes lie around them). So every read
runs in a listing full of the other cases' damage. Per case:
- Arrow (`engine.arrow.read_topic`, bucket source), with failOnDataLoss on and off: a typed
  error (a KafkaEngineError) naming the partition and the damaged segment, or rows that are
  exactly a correct subset of the records written (all of them when failOnDataLoss is on; at
  least those of the good segments when it is off); for keys that do not parse, exactly every
  record;
- Spark's `kafka-tiered` source with `.option("bucket", ...)`, the same rule through Spark
  (Spark is slow, so: one scan of every case the listing sees with failOnDataLoss off, and a
  few cases, one per kind of failure, with it on);
- `python -m engine scrub --bucket ... --json` (run once over the whole prefix): a finding
  naming the planted object, and none about the good segments.
Every read runs on a daemon thread bounded by BOUND_S, so a hang fails its test instead of
blocking the run.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from bucket_support import CHUNK, HandBucket, HandSegment, expected_rows
from spark_support import REPO, arrow_rows

from engine.arrow import read_topic
from engine.common import Uuid
from engine.errors import KafkaEngineError
from engine.records import MemoryRecords
from engine.remote.objectstore.manifest import VariableChunkIndex
from engine.remote.objectstore.transforms import compress_chunk

#: seconds any one read (or the scrub) may take before it counts as a hang
BOUND_S = 60
GOOD_FIRST, DAMAGED, GOOD_LAST = (0, 9), (10, 69), (70, 79)
ALL_RANGES = [GOOD_FIRST, DAMAGED, GOOD_LAST]
#: a ghost segment's epochs: were its objects ever read, it would win the lineage and its
#: values ("ghost-value-N") would be wrong rows
GHOST_EPOCHS = [(0, 0), (5, 10)]


# ---- planting ----------------------------------------------------------------------------

@dataclass
class Planted:
    """One case: its topic, the damaged segment (None: keys that do not parse), the keys a
    scrub finding may name for it, the finding kinds that describe it (empty: any), and the
    junk keys."""

    topic: str
    damaged: HandSegment | None
    keys: tuple[str, ...]
    kinds: frozenset[str]
    good: tuple[HandSegment, ...] = ()
    junk: tuple[str, ...] = ()
    #: the damage lies where a listing does not look (found only by reading the records)
    at_read: bool = False

    @property
    def partition(self) -> str:
        return f"{self.topic}-0"

    @property
    def clean_read(self) -> bool:
        return self.damaged is None


CASES: dict[str, Callable[[HandBucket], Planted]] = {}


def case(fn):
    CASES[fn.__name__.replace("_", "-")] = fn
    return fn


def segments(hand: HandBucket) -> tuple[HandSegment, HandSegment, HandSegment]:
    """Offsets 0-9 and 70-79 put; 10-69 built, not put (the case damages and puts it)."""
    first = hand.segment(*GOOD_FIRST, [(0, 0)])
    last = hand.segment(*GOOD_LAST, [(0, 0)])
    middle = hand.segment(*DAMAGED, [(0, 0)], put=False)
    return first, middle, last


def planted(hand, seg, suffixes, kinds, good, at_read=False) -> Planted:
    return Planted(hand.topic, seg, tuple(seg.key(s) for s in suffixes), frozenset(kinds),
                   good, at_read=at_read)


def batches(log: bytes):
    """(position, size) of each record batch of `log`."""
    headers = MemoryRecords(log).scan()
    return [(int(p), int(s)) for p, s in zip(headers["position"], headers["size"])]


def manifest_of(seg: HandSegment, **chunk_index) -> dict:
    m = json.loads(seg.manifest)
    m["chunkIndex"].update(chunk_index)
    return m


def fixed_sizes(file_size: int) -> dict:
    """The plain fixed chunk index of a `.log` of `file_size` bytes (self-consistent)."""
    n = max(1, -(-file_size // CHUNK))
    return {"originalFileSize": file_size, "transformedChunkSize": CHUNK,
            "finalTransformedChunkSize": file_size - (n - 1) * CHUNK}


def put_manifest(hand, seg, manifest) -> None:
    seg.manifest = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    hand.put(seg)


def compressed(seg: HandSegment, lie: Callable[[list[int]], list[int]]) -> None:
    """`seg` as the plugin writes it with compression: each chunk one zstd frame, a variable
    chunk index listing the sizes `lie` makes of the true ones."""
    plain = seg.log
    frames = [compress_chunk(plain[i:i + CHUNK]) for i in range(0, len(plain), CHUNK)]
    seg.log = b"".join(frames)
    m = json.loads(seg.manifest)
    m["compression"] = True
    m["chunkIndex"] = VariableChunkIndex(CHUNK, len(plain),
                                         lie([len(f) for f in frames])).to_json_obj()
    seg.manifest = json.dumps(m).encode()


@case
def log_shorter_than_its_manifest(hand):
    a, seg, c = segments(hand)
    hand.put(seg, ("indexes", "rsm-manifest"))
    hand.put_raw(seg.key("log"), seg.log[:-25])
    return planted(hand, seg, ["log"], {"size-mismatch"}, (a, c))


@case
def log_cut_inside_a_batch(hand):
    a, seg, c = segments(hand)
    pos, size = batches(seg.log)[len(batches(seg.log)) // 2]
    hand.put(seg, ("indexes", "rsm-manifest"))
    hand.put_raw(seg.key("log"), seg.log[:pos + size // 2])
    return planted(hand, seg, ["log"], {"size-mismatch"}, (a, c))


@case
def log_cut_inside_a_batch_manifest_agrees(hand):
    # the sizes all agree: only the batch framing (and the offset index) tell
    a, seg, c = segments(hand)
    pos, size = batches(seg.log)[-1]
    seg.log = seg.log[:pos + size // 2]
    put_manifest(hand, seg, manifest_of(seg, **fixed_sizes(len(seg.log))))
    return planted(hand, seg, ["log", "rsm-manifest", "indexes"],
                   {"unreadable-segment", "corrupt-batch", "index-mismatch"}, (a, c))


@case
def indexes_truncated(hand):
    a, seg, c = segments(hand)
    hand.put(seg, ("log", "rsm-manifest"))
    hand.put_raw(seg.key("indexes"), seg.indexes[:-5])
    return planted(hand, seg, ["indexes"], {"size-mismatch"}, (a, c))


@case
def indexes_0_bytes(hand):
    a, seg, c = segments(hand)
    hand.put(seg, ("log", "rsm-manifest"))
    hand.put_raw(seg.key("indexes"), b"")
    return planted(hand, seg, ["indexes"], {"size-mismatch"}, (a, c))


@case
def log_0_bytes(hand):
    a, seg, c = segments(hand)
    hand.put(seg, ("indexes", "rsm-manifest"))
    hand.put_raw(seg.key("log"), b"")
    return planted(hand, seg, ["log"], {"size-mismatch"}, (a, c))


@case
def log_0_bytes_manifest_agrees(hand):
    a, seg, c = segments(hand)
    seg.log = b""
    put_manifest(hand, seg, manifest_of(seg, **fixed_sizes(0)))
    return planted(hand, seg, ["log", "rsm-manifest", "indexes"],
                   {"unreadable-segment", "bad-manifest", "index-mismatch"}, (a, c))


@case
def manifest_file_size_larger_than_the_log(hand):
    a, seg, c = segments(hand)
    put_manifest(hand, seg, manifest_of(seg, **fixed_sizes(len(seg.log) + 700)))
    return planted(hand, seg, ["log"], {"size-mismatch"}, (a, c))


@case
def manifest_file_size_smaller_inside_a_batch(hand):
    a, seg, c = segments(hand)
    put_manifest(hand, seg, manifest_of(seg, **fixed_sizes(len(seg.log) - 40)))
    return planted(hand, seg, ["log"], {"size-mismatch"}, (a, c))


@case
def manifest_file_size_smaller_at_a_batch_boundary(hand):
    # the segment would silently end early: offsets 10-69 must not shrink unnoticed
    a, seg, c = segments(hand)
    pos, _ = batches(seg.log)[-3]
    put_manifest(hand, seg, manifest_of(seg, **fixed_sizes(pos)))
    return planted(hand, seg, ["log"], {"size-mismatch"}, (a, c))


@case
def manifest_index_past_the_indexes_object(hand):
    a, seg, c = segments(hand)
    m = json.loads(seg.manifest)
    m["segmentIndexes"]["leaderEpoch"]["position"] += len(seg.indexes)
    put_manifest(hand, seg, m)
    return planted(hand, seg, ["indexes", "rsm-manifest"], {"size-mismatch", "bad-manifest"},
                   (a, c))


@case
def manifest_index_size_past_the_indexes_object(hand):
    a, seg, c = segments(hand)
    m = json.loads(seg.manifest)
    m["segmentIndexes"]["offset"]["size"] += 1000
    put_manifest(hand, seg, m)
    return planted(hand, seg, ["indexes", "rsm-manifest"], {"size-mismatch", "bad-manifest"},
                   (a, c))


@case
def manifest_indexes_overlapping(hand):
    # every index inside the object, but the time index starts inside the offset index
    a, seg, c = segments(hand)
    m = json.loads(seg.manifest)
    m["segmentIndexes"]["timestamp"]["position"] -= 4
    put_manifest(hand, seg, m)
    return planted(hand, seg, ["indexes", "rsm-manifest"],
                   {"size-mismatch", "bad-manifest", "index-mismatch"}, (a, c))


@case
def manifest_fixed_chunk_sizes_do_not_sum_to_the_log(hand):
    a, seg, c = segments(hand)
    m = manifest_of(seg)
    m["chunkIndex"]["finalTransformedChunkSize"] += 7
    put_manifest(hand, seg, m)
    return planted(hand, seg, ["rsm-manifest", "log"], {"bad-manifest", "size-mismatch"},
                   (a, c))


@case
def manifest_variable_chunk_sizes_past_the_log(hand):
    a, seg, c = segments(hand)
    compressed(seg, lambda sizes: [*sizes[:-1], sizes[-1] + 5])
    hand.put(seg)
    return planted(hand, seg, ["log", "rsm-manifest"], {"size-mismatch", "bad-manifest"},
                   (a, c))


@case
def manifest_variable_chunk_sizes_shifted(hand):
    # the sizes sum to the object, but chunks 0 and 1 are cut in the wrong place; the tail,
    # which the listing reads to find the segment's end, is whole and decodes
    a, seg, c = segments(hand)
    last_batch = batches(seg.log)[-1][0]
    assert last_batch >= 2 * CHUNK, "the tail must lie past the damaged chunks"
    compressed(seg, lambda sizes: [sizes[0] - 3, sizes[1] + 3, *sizes[2:]])
    hand.put(seg)
    return planted(hand, seg, ["log"], {"corrupt-chunk", "corrupt-batch"}, (a, c), True)


@case
def manifest_version_2(hand):
    a, seg, c = segments(hand)
    m = json.loads(seg.manifest)
    m["version"] = "2"
    put_manifest(hand, seg, m)
    return planted(hand, seg, ["rsm-manifest"], {"bad-manifest"}, (a, c))


@case
def manifest_not_json(hand):
    a, seg, c = segments(hand)
    put_manifest(hand, seg, seg.manifest[:len(seg.manifest) // 2])
    return planted(hand, seg, ["rsm-manifest"], {"bad-manifest"}, (a, c))


@case
def manifest_0_bytes(hand):
    a, seg, c = segments(hand)
    put_manifest(hand, seg, b"")
    return planted(hand, seg, ["rsm-manifest"], {"bad-manifest"}, (a, c))


@case
def manifest_missing_fields(hand):
    a, seg, c = segments(hand)
    m = json.loads(seg.manifest)
    del m["segmentIndexes"]["offset"]
    del m["chunkIndex"]["originalFileSize"]
    put_manifest(hand, seg, m)
    return planted(hand, seg, ["rsm-manifest"], {"bad-manifest"}, (a, c))


@case
def log_bytes_flipped_mid_segment(hand):
    # inside the records of a batch in the middle: the framing holds, the CRC does not
    a, seg, c = segments(hand)
    pos, _ = batches(seg.log)[len(batches(seg.log)) // 2]
    log = bytearray(seg.log)
    for i in range(pos + 70, pos + 74):
        log[i] ^= 0xFF
    seg.log = bytes(log)
    hand.put(seg)
    return planted(hand, seg, ["log"], {"corrupt-batch"}, (a, c), True)


def ghost(hand: HandBucket) -> HandSegment:
    """A whole segment of offsets 10-69 whose values no good segment holds: junk keys carry
    its bytes, so a reader that took one for a segment would return wrong rows."""
    return hand.segment(*DAMAGED, GHOST_EPOCHS, leader="ghost-", put=False)


def put_ghost(hand, g: HandSegment, stem: str) -> list[str]:
    """The ghost's three objects under `stem` + .log/.indexes/.rsm-manifest."""
    keys = []
    for suffix, data in (("log", g.log), ("indexes", g.indexes), ("rsm-manifest", g.manifest)):
        hand.put_raw(f"{stem}.{suffix}", data)
        keys.append(f"{stem}.{suffix}")
    return keys


def clean(hand, junk) -> Planted:
    """A case of junk keys around three good segments: the readers must read every record."""
    a, b, c = segments(hand)
    hand.put(b)
    return Planted(hand.topic, None, tuple(junk), frozenset(), (a, b, c), tuple(junk))


def noncanonical(uuid_text: str) -> str:
    """Another spelling of the same 16 bytes: the last base64 character carries 2 bits of the
    id and 4 that must be 0; setting one of those gives a key no broker writes."""
    return uuid_text[:-1] + chr(ord(uuid_text[-1]) + 1)


@case
def junk_names_under_the_topic_prefix(hand):
    g = ghost(hand)
    topic_dir = f"{hand.prefix}{hand.topic}-{hand.topic_id}"
    part = f"{topic_dir}/0"
    junk = [f"{topic_dir}/notes.txt", f"{part}/notes.txt",
            f"{part}/{10:020d}-{g.segment_id}",                 # no suffix
            f"{part}/{10:020d}_{g.segment_id}.log",             # wrong separator
            f"{part}/{10:020d}-{g.segment_id}.LOG",
            f"{part}/{10:020d}-{g.segment_id}.log.tmp",
            f"{part}/{10:020d}-{g.segment_id}.rsm-manifest.bak",
            f"{part}/{10:020d}-{str(g.segment_id)[:21]}.rsm-manifest",
            f"{hand.prefix}{hand.topic}-short/0/{10:020d}-{g.segment_id}.rsm-manifest"]
    data = {"log": g.log, "LOG": g.log, "tmp": g.log, "bak": g.manifest,
            "rsm-manifest": g.manifest}
    for key in junk:
        hand.put_raw(key, data.get(key.rpartition(".")[2], b"junk"))
    return clean(hand, junk)


@case
def partition_directory_not_a_number(hand):
    g = ghost(hand)
    topic_dir = f"{hand.prefix}{hand.topic}-{hand.topic_id}"
    junk = []
    for directory in ("x0", "00", "-1", "0x0", "99999999999", "2147483648"):
        junk += put_ghost(hand, g, f"{topic_dir}/{directory}/{10:020d}-{g.segment_id}")
    return clean(hand, junk)


@case
def start_offset_not_20_digits(hand):
    g = ghost(hand)
    part = f"{hand.prefix}{hand.topic}-{hand.topic_id}/0"
    junk = []
    for start in ("10", f"{10:019d}", f"{10:021d}", "9" * 20, f"{-10:020d}", "1e" + "0" * 18):
        junk += put_ghost(hand, g, f"{part}/{start}-{g.segment_id}")
    return clean(hand, junk)


@case
def segment_id_not_canonical_base64(hand):
    # a ghost after the good segments, its id spelled as no broker spells one: a listing
    # that parses it reads objects under another key than the ones it listed
    g = hand.segment(80, 89, GHOST_EPOCHS, leader="ghost-", put=False)
    part = f"{hand.prefix}{hand.topic}-{hand.topic_id}/0"
    return clean(hand, put_ghost(hand, g, f"{part}/{80:020d}-{noncanonical(str(g.segment_id))}"))


@case
def topic_id_not_canonical_base64(hand):
    g = hand.segment(80, 89, GHOST_EPOCHS, leader="ghost-", put=False)
    topic_dir = f"{hand.prefix}{hand.topic}-{noncanonical(str(hand.topic_id))}"
    return clean(hand, put_ghost(hand, g, f"{topic_dir}/0/{80:020d}-{g.segment_id}"))


# ---- the bucket, the scrub ---------------------------------------------------------------

@dataclass
class Hostile:
    """The planted bucket, its cases by name and the scrub's outcome."""

    hand: HandBucket
    cases: dict[str, Planted] = field(default_factory=dict)
    scrub: tuple | None = None  # (exit status, report or None, stderr)


@pytest.fixture(scope="module")
def hostile(s3_server):
    """Every case planted under one prefix (each its own topic), and one scrub of it all."""
    hand = HandBucket(s3_server)
    out = Hostile(hand)
    try:
        for name, plant in CASES.items():
            # one topic per case, under the one prefix (HandBucket builds for its topic)
            hand.topic, hand.topic_id = name, Uuid.random()
            out.cases[name] = plant(hand)
        listed = {info.key for info in hand.store.list(hand.prefix)}
        for c in out.cases.values():  # the store kept every junk key as named
            assert set(c.junk) <= listed, sorted(set(c.junk) - listed)
        out.scrub = run_scrub(hand)
        yield out
    finally:
        hand.close()


def run_scrub(hand):
    store = [a for k, v in hand.settings.items() for a in ("--store", f"{k}={v}")]
    try:
        run = subprocess.run([sys.executable, "-m", "engine", "scrub", "--bucket", hand.url,
                              *store, "--json"], cwd=REPO, capture_output=True, text=True,
                             timeout=BOUND_S, check=False,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        return None, None, f"the scrub did not finish within {BOUND_S} s"
    try:
        report = json.loads(run.stdout)
    except ValueError:
        report = None
    return run.returncode, report, run.stderr


# ---- reading within a bound --------------------------------------------------------------

def within(fn: Callable[[], object], what: str):
    """fn()'s result, or the exception it raised (returned, not raised); a failure when it
    has not finished within BOUND_S (on a daemon thread, so a hung read never blocks the
    run's exit)."""
    done: concurrent.futures.Future = concurrent.futures.Future()

    def run():
        try:
            done.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - judged by the caller
            done.set_exception(exc)

    threading.Thread(target=run, name=f"hostile-{what}", daemon=True).start()
    concurrent.futures.wait([done], timeout=BOUND_S)
    if not done.done():
        pytest.fail(f"{what}: the read did not finish within {BOUND_S} s (a hang)")
    return done.exception() or done.result()


def names_partition(text: str, partition: str) -> bool:
    # "<topic>-0" as a partition, not the start of "<topic>-<topic id>" in a key
    return re.search(re.escape(partition) + r"(?![A-Za-z0-9_-])", text) is not None


def judge(c: Planted, got, fail_on_data_loss: bool, text_of=str) -> list[str]:
    """What one read's outcome `got` (rows, or the exception raised) breaks of the
    requirement (every problem, so a failure shows them all)."""
    how = f"failOnDataLoss={fail_on_data_loss}"
    if isinstance(got, BaseException):
        text = text_of(got)
        if c.clean_read:
            return [f"{how}: keys that do not parse failed a read of good segments: "
                    f"{type(got).__name__}: {text}"]
        problems = []
        if not names_partition(text, c.partition):
            problems.append(f"{how}: the error does not name the partition: {text}")
        sid = str(c.damaged.segment_id)
        if sid not in text:
            problems.append(f"{how}: the error names neither the damaged segment ({sid}) nor "
                            f"its objects: {type(got).__name__}: {text}")
        return problems
    full = expected_rows(ALL_RANGES, topic=c.topic)
    wrong = [r for r in got if r not in full]
    if wrong:
        return [f"{how}: {len(wrong)} wrong rows, e.g. {wrong[:2]}"]
    if len(set(got)) != len(got):
        return [f"{how}: rows read twice"]
    if fail_on_data_loss or c.clean_read:
        if got != full:
            return [f"{how}: {len(full) - len(got)} records silently missing"]
        return []
    good = [r for s in c.good for r in expected_rows([(s.start, s.end)], topic=c.topic)]
    if not set(good) <= set(got):
        return [f"{how}: records of the good segments are missing"]
    return []


def arrow_read(hand, topic, fail_on_data_loss):
    with read_topic(topic, bucket=hand.url, store=hand.settings, include_headers=True,
                    fail_on_data_loss=fail_on_data_loss) as stream:
        return arrow_rows(stream.read_all())


@pytest.mark.parametrize("name", list(CASES))
def test_the_arrow_reader(hostile, name):
    c = hostile.cases[name]
    problems = []
    for fdl in (False, True):
        got = within(lambda fdl=fdl: arrow_read(hostile.hand, c.topic, fdl),
                     f"arrow {name} failOnDataLoss={fdl}")
        if isinstance(got, BaseException) and not isinstance(got, KafkaEngineError):
            raise AssertionError(f"failOnDataLoss={fdl}: an untyped {type(got).__name__} "
                                 "escaped the reader") from got
        problems += judge(c, got, fdl)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", list(CASES))
def test_scrub_reports_the_planted_problem(hostile, name):
    rc, report, err = hostile.scrub
    assert report is not None, f"the scrub gave no JSON report (exit {rc}): {err[-2000:]}"
    assert rc == 1, err[-2000:]
    c = hostile.cases[name]
    mine = [f for f in report["findings"] if f["partition"] == c.partition or f["key"] in c.keys]
    planted_keys = {*c.keys, *c.junk}
    hits = [f for f in mine if f["key"] in planted_keys and (not c.kinds or f["kind"] in c.kinds)]
    assert hits, (f"no finding names the planted object ({sorted(planted_keys)}, one of "
                  f"{sorted(c.kinds)}); the case's findings: {mine}")
    assert all(f["partition"] == c.partition for f in hits if c.damaged is not None)
    for s in c.good:  # nothing said against the good segments
        assert not [f for f in mine if f["key"] and str(s.segment_id) in f["key"]], mine


# ---- Spark -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def quiet_spark(spark):
    spark.sparkContext.setLogLevel("OFF")  # the failing tasks are expected
    yield spark
    spark.sparkContext.setLogLevel("WARN")  # as it was


def spark_read(spark, hand, topics, fail_on_data_loss):
    reader = spark.read.format("kafka-tiered").option("bucket", hand.url)
    for k, v in hand.settings.items():
        reader = reader.option(k, v)
    df = (reader.option("subscribe", ",".join(topics)).option("includeHeaders", "true")
          .option("failOnDataLoss", str(fail_on_data_loss).lower()).load())
    return arrow_rows(df.toArrow())


def spark_within(spark, fn, what):
    try:
        return within(fn, what)
    except BaseException:
        spark.sparkContext.cancelAllJobs()  # a hung job must not hold the session's stop
        raise


_ENGINE_ERROR = re.compile(r"engine(?:\._native)?\.errors\.(\w+): ")


def spark_text(exc) -> str:
    """A Spark failure's text, after checking that the Python error it carries is typed."""
    import engine.errors

    text = str(exc)
    raised = _ENGINE_ERROR.findall(text)
    assert raised, f"no engine error in the Spark failure: {type(exc).__name__}: {text[:3000]}"
    cls = getattr(engine.errors, raised[-1], None)
    assert isinstance(cls, type) and issubclass(cls, KafkaEngineError), raised[-1]
    return text


def test_spark_reads_every_listed_case_without_a_wrong_row(hostile, quiet_spark):
    """One scan of every topic whose damage the listing sees (each case's own partition),
    failOnDataLoss=false: exactly a correct subset of each topic's records."""
    spark = quiet_spark
    cases = [c for c in hostile.cases.values() if not c.at_read]
    got = spark_within(spark, lambda: spark_read(spark, hostile.hand, [c.topic for c in cases],
                                                 False), "spark, every listed case")
    if isinstance(got, BaseException):
        text = spark_text(got)
        named = [c for c in cases if names_partition(text, c.partition)]
        assert named, f"the failure names no case's partition: {text[:3000]}"
        problems = judge(named[0], got, False, text_of=lambda _: text)
    else:
        problems = []
        for c in cases:
            mine = [r for r in got if r[2] == c.topic]
            problems += [f"{c.topic}: {p}" for p in judge(c, mine, False)]
        stray = {r[2] for r in got} - {c.topic for c in cases}
        assert not stray, f"rows of topics never asked for: {stray}"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", [
    "log-shorter-than-its-manifest",           # lost offsets, found while planning
    "log-bytes-flipped-mid-segment",           # a CRC, found by a task
    "manifest-variable-chunk-sizes-shifted",   # a chunk that does not decode, in a task
    "start-offset-not-20-digits",              # junk keys: every record, nothing else
    "segment-id-not-canonical-base64",         # junk keys the listing takes for a segment
])
def test_spark_with_fail_on_data_loss(hostile, quiet_spark, name):
    spark = quiet_spark
    c = hostile.cases[name]
    got = spark_within(spark, lambda: spark_read(spark, hostile.hand, [c.topic], True),
                       f"spark {name}")
    text_of = spark_text if isinstance(got, BaseException) else str
    problems = judge(c, got, True, text_of=text_of)
    assert not problems, "\n".join(problems)
