"""engine.spark planning and options as pure functions (no Spark session here)."""

import itertools
import pickle

import numpy as np
import pytest

from engine.common import Uuid
from engine.config import ConfigError
from engine.errors import OffsetOutOfRangeError
from engine.log.offset_index import OFFSET_ENTRY_DTYPE
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.scan.planning import (
    end_position_for_offset,
    lineage,
    pack_ranges,
    plan_partition,
    position_for_offset,
    tier_bounds,
)
from engine.spark.options import EARLIEST, LATEST, parse_options

TIP = TopicIdPartition(Uuid.random(), "events", 0)
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def seg(start, end, epochs, size=1000, state=FINISHED, ts=0):
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TIP), start, end, 0, 0, ts,
                                    size, epochs, state=state)


def test_lineage_keeps_one_segment_per_offset_and_the_newest_epochs():
    a = seg(0, 99, {0: 0})
    b = seg(100, 199, {0: 100})
    # leader 1 took over at 150 after truncating the old leader's 150..199
    b1 = seg(100, 179, {0: 100, 1: 150})
    c = seg(180, 249, {1: 180})
    started = seg(250, 299, {1: 250}, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    chain = lineage([c, b, a, b1, started])
    assert [link.segment for link in chain] == [a, b1, c]
    assert [link.end for link in chain] == [100, 180, 250]
    assert tier_bounds(chain) == (0, 250)


def test_lineage_trims_an_overlapping_older_segment():
    a = seg(0, 120, {0: 0})        # copied by the old leader past where the new one starts
    b = seg(100, 199, {1: 100})
    chain = lineage([a, b])
    assert [(link.segment, link.end) for link in chain] == [(a, 100), (b, 200)]
    assert lineage([]) == [] and tier_bounds([]) is None


def test_offset_index_positions():
    entries = np.array([(9, 4100), (19, 8300), (29, 12500)], dtype=OFFSET_ENTRY_DTYPE)
    assert position_for_offset(entries, 5) == 0
    assert position_for_offset(entries, 9) == 4100
    assert position_for_offset(entries, 25) == 8300
    # batches holding offsets below 15 end before the entry after the first >= 15
    assert end_position_for_offset(entries, 15, 20000) == 12500
    assert end_position_for_offset(entries, 29, 20000) == 20000


def test_plan_cuts_large_segments_at_index_entries_and_packs_small_ones():
    big = seg(0, 999, {0: 0}, size=10_000)
    small1 = seg(1000, 1009, {0: 1000}, size=300)
    small2 = seg(1010, 1019, {0: 1010}, size=300)
    chain = lineage([big, small1, small2])
    positions = np.arange(1, 100) * 100
    entries = np.zeros(len(positions), dtype=OFFSET_ENTRY_DTYPE)
    entries["position"], entries["offset"] = positions, positions // 10 - 1
    calls = []

    def index(s):
        calls.append(s)
        return entries

    ranges = plan_partition("events", 0, chain, 0, 1020, 2500, index)
    assert [r.segment for r in ranges].count(big) == 4 and calls == [big]
    big_ranges = [r for r in ranges if r.segment is big]
    assert big_ranges[0].start_position == 0 and big_ranges[-1].end_position == 10_000
    assert all(a.end_position == b.start_position for a, b in itertools.pairwise(big_ranges))
    assert all(r.size <= 2500 for r in big_ranges)
    tasks = pack_ranges(ranges, 2500)
    assert [len(t) for t in tasks] == [1, 1, 1, 1, 2]  # the two small segments share a task
    assert pickle.loads(pickle.dumps(tasks)) == tasks

    mid = plan_partition("events", 0, chain, 105, 1005, 1 << 30, lambda s: entries)
    assert mid[0].start_position == 1000 and mid[0].min_offset == 105
    assert mid[-1].segment is small1 and mid[-1].max_offset == 1005


def test_plan_rejects_offsets_outside_the_tier():
    chain = lineage([seg(100, 199, {0: 100})])
    with pytest.raises(OffsetOutOfRangeError, match=r"\[100, 200\)") as info:
        plan_partition("events", 0, chain, 50, 150, 1 << 20, lambda s: None)
    assert info.value.offset == 50
    with pytest.raises(OffsetOutOfRangeError, match="outside the remote tier"):
        plan_partition("events", 0, chain, 150, 201, 1 << 20, lambda s: None)
    assert plan_partition("events", 0, chain, 150, 150, 1 << 20, lambda s: None) == []


def test_plan_prunes_by_timestamp_and_keeps_relevant_aborted_transactions():
    a, b = seg(0, 99, {0: 0}), seg(100, 199, {0: 100})
    a = RemoteLogSegmentMetadata(a.remote_log_segment_id, 0, 99, 500, 0, 0, 1000, {0: 0},
                                 state=FINISHED)
    b = RemoteLogSegmentMetadata(b.remote_log_segment_id, 100, 199, 900, 0, 0, 1000, {0: 100},
                                 state=FINISHED)
    ranges = plan_partition("events", 0, lineage([a, b]), 0, 200, 1 << 20, None,
                            min_timestamp=600, aborted=[(7, 120, 130), (8, 10, 20)])
    assert [r.segment for r in ranges] == [b]
    assert ranges[0].aborted == ((7, 120, 130),) and ranges[0].min_timestamp == 600


def test_options_follow_sparks_kafka_source():
    base = {"log.dirs": "/tmp/x"}
    o = parse_options({**base, "subscribe": "a, b", "startingOffsets": '{"a":{"0":5,"1":-2}}',
                       "endingOffsets": "latest", "includeHeaders": "true"})
    assert o.subscribe == ("a", "b") and o.include_headers and not o.read_committed
    assert o.starting.offsets == {("a", 0): 5, ("a", 1): EARLIEST}
    assert o.starting.default == EARLIEST and o.ending.default == LATEST
    assert parse_options({**base, "assign": '{"t":[1,0]}'}).assign == (("t", 0), ("t", 1))
    o = parse_options({**base, "subscribePattern": "ev.*", "startingTimestamp": "1000"})
    assert o.selects("events") and not o.selects("xevents") and o.starting.timestamp == 1000
    assert parse_options({**base, "subscribe": "a"}, streaming=True).starting.default == LATEST
    bad = [
        ({**base}, "exactly one of"),
        ({**base, "subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of"),
        ({**base, "subscribe": "a", "startingOffsets": "latest"}, "not allowed"),
        ({**base, "subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "not allowed"),
        ({**base, "subscribe": "a", "startingOffsets": '{"a":{"0":-7}}'}, "non-negative"),
        ({**base, "subscribe": "a", "startingOffsets": '{"a":'}, "not valid JSON"),
        ({**base, "assign": '["a"]'}, "JSON object"),
        ({**base, "subscribe": "a", "maxBytesPerPartition": "0"}, "at least 1"),
        ({**base, "subscribe": "a", "readCommitted": "yes"}, "true or false"),
        ({"subscribe": "a"}, "configuration is missing"),
        ({"subscribe": "a", "config": "/nonexistent/server.properties"}, "file not found"),
    ]
    for options, message in bad:
        with pytest.raises(ConfigError, match=message):
            parse_options(options)


def test_the_package_ships_the_auto_registration_module(tmp_path):
    """What pip installs holds the top-level pyspark_kafka_tiered module, and PySpark's
    discovery rule (top-level modules named pyspark_* with a DefaultSource) finds it there."""
    import subprocess
    import sys

    from spark_support import REPO

    out = tmp_path / "lib"
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib",
                            str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    assert (out / "pyspark_kafka_tiered.py").is_file()
    assert (out / "engine" / "spark" / "source.py").is_file()
    import shutil

    for native in (REPO / "engine" / "_native").glob("*.so"):  # what build_ext would add
        shutil.copy(native, out / "engine" / "_native" / native.name)
    probe = ("import pkgutil, importlib, sys\n"
             "from pyspark.sql.datasource import DataSource\n"
             "found = {}\n"
             "for info in pkgutil.iter_modules([sys.argv[1]]):\n"
             "    if info.name.startswith('pyspark_'):\n"
             "        mod = importlib.import_module(info.name)\n"
             "        if issubclass(mod.DefaultSource, DataSource):\n"
             "            found[mod.DefaultSource.name()] = mod.__file__\n"
             "print(found)\n")
    run = subprocess.run([sys.executable, "-c", probe, str(out)], cwd=out, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"'kafka-tiered': '{out / 'pyspark_kafka_tiered.py'}'" in run.stdout


def test_spark_tests_fail_clearly_without_java(tmp_path):
    import os
    import subprocess
    import sys

    from spark_support import REPO

    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java on it
    code = "import spark_support; spark_support.require_java()"
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO / "tests", env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "Java is missing: the Spark tests need a JDK 17+" in run.stderr


def test_min_partitions_shrinks_the_task_size():
    o = parse_options({"log.dirs": "/tmp/x", "subscribe": "a", "minPartitions": "8"})
    assert o.min_partitions == 8 and o.decode_ahead
    with pytest.raises(ConfigError, match="at least 1"):
        parse_options({"log.dirs": "/tmp/x", "subscribe": "a", "minPartitions": "0"})


def test_rate_limit_shares_max_offsets_by_lag():
    from engine.spark.source import rate_limit

    begin = {("t", "0"): 0, ("t", "1"): 100, ("t", "2"): 5}
    end = {("t", "0"): 900, ("t", "1"): 200, ("t", "2"): 5}
    assert rate_limit(begin, end, 5000) == end
    assert rate_limit(begin, end, 100) == {("t", "0"): 90, ("t", "1"): 110, ("t", "2"): 5}
    # a share below one offset still moves by one, as Spark's Kafka source does
    assert rate_limit({"a": 0, "b": 0}, {"a": 1000, "b": 1}, 10) == {"a": 9, "b": 1}


def test_the_installed_environment_discovers_the_source_as_pyspark_does(tmp_path):
    """What the README's install gives a user: with no PYTHONPATH and from an unrelated
    directory, PySpark's own lookup (pkgutil.iter_modules over sys.path, keeping
    pyspark_* modules with a DefaultSource) finds `kafka-tiered`."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = ("from pkgutil import iter_modules\n"
             "import importlib\n"
             "found = [importlib.import_module(m.name).DefaultSource.name()\n"
             "         for m in iter_modules() if m.name.startswith('pyspark_')]\n"
             "print(found)\n")
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "'kafka-tiered'" in run.stdout, (
        "pyspark_kafka_tiered is not discoverable from the installed environment: install "
        f"the project with scripts/setup.sh (editable compat mode) or as a wheel; got "
        f"{run.stdout!r}")
