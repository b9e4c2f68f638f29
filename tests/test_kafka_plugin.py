"""The broker plugin's RemoteStorageManager (kafka-plugin/) driven as a broker drives it, in a
real JVM with the engine embedded through jep, against a real S3 server and the filesystem
tier: every call round-trips byte-exact in the Aiven plugin's bucket format (objects the
Python tier reads, and the other way round), errors arrive as Kafka's exception types with
the engine's message and no secret, a bad venv or setting fails `configure` naming the key
and the path, concurrent fetches from many threads stay exact, and the object-store metrics
are on JMX under the plugin's names."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import obstore
import pytest
from kafka_plugin_support import (
    INSTALLED_JAR,
    PLUGIN_JAR,
    VENV,
    copy_words,
    describe,
    metadata_words,
    run_driver,
)
from rsm_crash_writer import make_segment, segment_metadata

from engine.common import Uuid
from engine.remote import IndexType
from engine.remote.metadata import TopicIdPartition
from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

TIP = TopicIdPartition(Uuid.from_string("lZ6vvmajTWKDBUTV6SQAtQ"), "plugin-topic", 2)
S3_BACKEND = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"
MiB = 1 << 20
KAFKA_INDEX = {IndexType.OFFSET: "OFFSET", IndexType.TIMESTAMP: "TIMESTAMP",
               IndexType.PRODUCER_SNAPSHOT: "PRODUCER_SNAPSHOT",
               IndexType.LEADER_EPOCH: "LEADER_EPOCH", IndexType.TRANSACTION: "TRANSACTION"}


@pytest.fixture(scope="module")
def segment(tmp_path_factory):
    """A closed segment at offset 100 with aborted transactions (so a .txnindex)."""
    return make_segment(tmp_path_factory.mktemp("local"), 100, batches=40, aborted=3, seed=3)


def s3_configs(s3_server, **extra) -> dict:
    configs = dict(s3_server.config())
    configs.update({"storage.backend.class": S3_BACKEND, "chunk.size": "1000",
                    "key.prefix": f"plugin-{uuid.uuid4().hex[:8]}/",
                    "engine.venv": str(VENV)})
    configs.update(extra)
    return configs


def python_rsm(configs) -> ObjectStorageRemoteStorageManager:
    rsm = ObjectStorageRemoteStorageManager()
    rsm.configure({k: v for k, v in configs.items() if k != "engine.venv"})
    return rsm


def expected_index(data, index_type) -> bytes:
    return {IndexType.OFFSET: data.offset_index.read_bytes(),
            IndexType.TIMESTAMP: data.time_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot.read_bytes(),
            IndexType.LEADER_EPOCH: data.leader_epoch_index,
            IndexType.TRANSACTION: data.transaction_index.read_bytes()}[index_type]


def listed(s3_server, prefix) -> list[str]:
    return sorted(m["path"] for page in obstore.list(s3_server.raw_store(), prefix=prefix)
                  for m in page)


def test_copy_fetch_index_delete_round_trip_in_the_aiven_layout(s3_server, segment, tmp_path):
    data, last, size = segment
    md = segment_metadata(TIP, 100, last, size)
    words = metadata_words(md)
    log = data.log_segment.read_bytes()
    configs = s3_configs(s3_server)
    script = [f"copy {words} {copy_words(data)}",
              f"fetch {words} out={tmp_path / 'whole'} chunk=17",
              f"fetch {words} from=1500 to=2999 out={tmp_path / 'range'}",
              f"fetch {words} from={size} out={tmp_path / 'empty'}"]
    script += [f"index {words} type={KAFKA_INDEX[t]} out={tmp_path / t.name}"
               for t in IndexType]
    out = run_driver(tmp_path / "drv", configs, script)
    assert [line.get("error") for line in out] == [None] * len(out), out
    assert (tmp_path / "whole").read_bytes() == log
    assert (tmp_path / "range").read_bytes() == log[1500:3000]
    assert (tmp_path / "empty").read_bytes() == b""
    for t in IndexType:
        assert (tmp_path / t.name).read_bytes() == expected_index(data, t), t
    # the Aiven plugin's keys, read back byte-exact by the engine's own tier in Python
    prefix = configs["key.prefix"]
    stem = f"{prefix}{TIP.topic}-{TIP.topic_id}/{TIP.partition}/{100:020d}-" \
           f"{md.remote_log_segment_id.id}"
    assert listed(s3_server, prefix) == [f"{stem}.indexes", f"{stem}.log",
                                         f"{stem}.rsm-manifest"]
    with python_rsm(configs) as rsm:
        assert rsm.read_range(md, 0, size) == log
        assert rsm.fetch_index_bytes(md, IndexType.TRANSACTION) == \
            data.transaction_index.read_bytes()
    out = run_driver(tmp_path / "drv2", configs,
                     [f"delete {words}", f"delete {words}",
                      f"fetch {words} out={tmp_path / 'gone'}"])
    assert [line.get("error") for line in out[1:3]] == [None, None]
    assert out[3]["error"] == "RemoteResourceNotFoundException", out
    assert str(md.remote_log_segment_id.id) in out[3]["message"]
    assert listed(s3_server, prefix) == []


def test_a_segment_the_python_tier_wrote_reads_through_the_plugin(s3_server, segment,
                                                                  tmp_path):
    """One bucket, either side: zstd + chunks written by the engine in Python, read by the
    broker plugin (and so by a broker switched from the Aiven plugin, same settings)."""
    data, last, size = segment
    configs = s3_configs(s3_server, **{"compression.enabled": "true"})
    with python_rsm(configs) as rsm:
        md = segment_metadata(TIP, 100, last, size)
        custom = rsm.copy_log_segment_data(md, data)
        assert custom is None
    words = metadata_words(md)
    out = run_driver(tmp_path / "drv", configs,
                     [f"fetch {words} from=999 out={tmp_path / 'tail'} chunk=4096",
                      f"index {words} type=OFFSET out={tmp_path / 'offset'}"])
    assert [line.get("error") for line in out] == [None] * 3, out
    assert (tmp_path / "tail").read_bytes() == data.log_segment.read_bytes()[999:]
    assert (tmp_path / "offset").read_bytes() == data.offset_index.read_bytes()


def test_a_transaction_index_never_copied_is_not_found(s3_server, tmp_path):
    """Kafka's RemoteIndexCache reads RemoteResourceNotFoundException for the transaction
    index as an empty one."""
    data, last, size = make_segment(tmp_path / "local", 0, batches=5, seed=1)
    assert data.transaction_index is None
    md = segment_metadata(TIP, 0, last, size)
    words = metadata_words(md)
    out = run_driver(tmp_path / "drv", s3_configs(s3_server),
                     [f"copy {words} {copy_words(data)}",
                      f"index {words} type=TRANSACTION out={tmp_path / 'txn'}",
                      f"index {words} type=OFFSET out={tmp_path / 'offset'}"])
    assert out[1].get("error") is None
    assert out[2]["error"] == "RemoteResourceNotFoundException"
    assert "transaction index" in out[2]["message"]
    assert out[3].get("error") is None


def test_the_filesystem_tier_through_the_plugin(segment, tmp_path):
    data, last, size = segment
    md = segment_metadata(TIP, 100, last, size)
    words = metadata_words(md)
    tier = tmp_path / "tier"
    tier.mkdir()
    out = run_driver(tmp_path / "drv", {"dirs": str(tier), "engine.venv": str(VENV)},
                     [f"copy {words} {copy_words(data)}",
                      f"fetch {words} from=10 out={tmp_path / 'log'}",
                      f"index {words} type=TIMESTAMP out={tmp_path / 'time'}"])
    assert [line.get("error") for line in out] == [None] * 4, out
    assert (tmp_path / "log").read_bytes() == data.log_segment.read_bytes()[10:]
    assert (tmp_path / "time").read_bytes() == data.time_index.read_bytes()


def test_concurrent_fetches_from_many_threads_are_exact(s3_server, segment, tmp_path):
    """Kafka's reader, copier and expiration threads call one instance at once; each
    thread here reads the whole segment several times (`parallel` counts every byte and
    fails on any error or short read)."""
    data, last, size = segment
    md = segment_metadata(TIP, 100, last, size)
    words = metadata_words(md)
    out = run_driver(tmp_path / "drv", s3_configs(s3_server),
                     [f"copy {words} {copy_words(data)}",
                      f"parallel {words} threads=6 rounds=4",
                      f"fetch {words} out={tmp_path / 'after'}"])
    assert [line.get("error") for line in out] == [None] * 4, out
    assert out[2]["bytes"] == 6 * 4 * size
    assert (tmp_path / "after").read_bytes() == data.log_segment.read_bytes()


#: the plugin's fallback where it cannot copy out of the engine's memory
DIRECT_COPY = ("-Dtierengine.kafka.rawCopy=false",)


def _segment_over_3_mib(tmp_path):
    """A closed segment of more than 3 MiB at offset 0: (its data, .log size, the driver's
    words for its metadata)."""
    data, last, size = make_segment(tmp_path / "local", 0, batches=150, records=100,
                                    value_size=200, seed=5)
    assert size > 3 * MiB
    return data, size, metadata_words(segment_metadata(TIP, 0, last, size))


def _memory_cache_configs(s3_server, cache_bytes: int, chunk_size: int = MiB) -> dict:
    """The object store in 1 MiB chunks with a memory chunk cache of `cache_bytes`."""
    return s3_configs(s3_server, **{
        "chunk.size": str(chunk_size), "fetch.chunk.cache.size": str(cache_bytes),
        "fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache"})


@pytest.mark.parametrize("java_opts", [(), DIRECT_COPY], ids=["mapped", "direct-buffer"])
def test_streams_over_1_mib_are_exact_from_any_position(s3_server, tmp_path, java_opts):
    """A stream reads 1 MiB ranges (mapped ones cut at 1 MiB-aligned positions): from an
    odd position, in odd read sizes, bounded across a boundary, from many threads, out of
    a chunk cache smaller than what the threads read at once (views outlive eviction)."""
    data, size, words = _segment_over_3_mib(tmp_path)
    log = data.log_segment.read_bytes()
    configs = _memory_cache_configs(s3_server, 2 * MiB)
    out = run_driver(tmp_path / "drv", configs,
                     [f"copy {words} {copy_words(data)}",
                      f"fetch {words} from=12345 out={tmp_path / 'tail'} chunk=300000",
                      f"fetch {words} from={MiB - 100} to={2 * MiB + 99} out="
                      f"{tmp_path / 'across'} chunk=4096",
                      f"parallel {words} threads=4 rounds=2"], java_opts=java_opts)
    assert [line.get("error") for line in out] == [None] * 5, out
    assert (tmp_path / "tail").read_bytes() == log[12345:]
    assert (tmp_path / "across").read_bytes() == log[MiB - 100:2 * MiB + 100]
    assert out[4]["bytes"] == 4 * 2 * size


@pytest.mark.parametrize("java_opts", [(), DIRECT_COPY], ids=["mapped", "direct-buffer"])
def test_an_open_ended_stream_maps_2_mib_at_once_up_to_its_chunks_end(s3_server, tmp_path,
                                                                      java_opts):
    """Kafka's reader opens a stream with no end and reads a batch, then up to its fetch
    size: a mapped stream asks for 2 MiB from where it starts (a view costs the same at any
    length; Kafka starts up to an index interval before the batch it wants), and the engine
    maps it whole, or up to the end of its chunk, never joining two; the direct-buffer path
    starts with 64 KiB (each range it pulls is copied whole)."""
    data, size, words = _segment_over_3_mib(tmp_path)
    log = data.log_segment.read_bytes()
    configs = _memory_cache_configs(s3_server, 8 * MiB, chunk_size=3 * MiB)
    near_end = 3 * MiB - 100  # 100 bytes before the first chunk's end
    out = run_driver(tmp_path / "drv", configs,
                     [f"copy {words} {copy_words(data)}",
                      f"fetch {words} from=12345 out={tmp_path / 'tail'}",
                      f"fetch {words} from={near_end} out={tmp_path / 'across'}"],
                     java_opts=java_opts)
    assert [line.get("error") for line in out] == [None] * 4, out
    assert (tmp_path / "tail").read_bytes() == log[12345:]
    assert (tmp_path / "across").read_bytes() == log[near_end:]
    assert out[2]["first_range"] == (64 * 1024 if java_opts else 2 * MiB)
    assert out[3]["first_range"] == (min(64 * 1024, size - near_end) if java_opts else 100)


def _jdk_denying_unsafe() -> str:
    """The `java` of a JDK that can deny sun.misc.Unsafe's memory access (24 or later: JEP
    498's `--sun-misc-unsafe-memory-access`): the machine's Temurin 25, or $JAVA_HOME_25."""
    for java in (os.environ.get("JAVA_HOME_25", ""), *sorted(
            Path("/usr/lib/jvm").glob("temurin-2[5-9]*"), reverse=True)):
        path = Path(java) / "bin" / "java"
        if java and path.exists():
            return str(path)
    pytest.fail("no JDK 25 found (/usr/lib/jvm/temurin-25*, or $JAVA_HOME_25): the plugin's "
                "fallback when Unsafe memory access is denied cannot be checked",
                pytrace=False)


def test_a_jdk_denying_unsafe_memory_access_reads_through_the_direct_buffer(s3_server,
                                                                             tmp_path):
    """Where the JDK denies sun.misc.Unsafe's memory access (the default of a later JDK,
    `--sun-misc-unsafe-memory-access=deny` from 24), the plugin finds the raw copy closed
    and streams through a direct buffer (its first range is the fallback's 64 KiB, not a
    2 MiB map), reading every byte exactly."""
    data, size, words = _segment_over_3_mib(tmp_path)
    log = data.log_segment.read_bytes()
    out = run_driver(tmp_path / "drv", _memory_cache_configs(s3_server, 8 * MiB),
                     [f"copy {words} {copy_words(data)}",
                      f"fetch {words} from=12345 out={tmp_path / 'tail'}",
                      f"parallel {words} threads=3 rounds=1"],
                     java=_jdk_denying_unsafe(),
                     java_opts=("--sun-misc-unsafe-memory-access=deny",))
    assert [line.get("error") for line in out] == [None] * 4, out
    assert out[2]["first_range"] == 64 * 1024
    assert (tmp_path / "tail").read_bytes() == log[12345:]
    assert out[3]["bytes"] == 3 * size


def test_mapped_streams_hold_no_direct_buffers(s3_server, segment, tmp_path):
    """Streams copy from the engine's own memory into the reader's array: no 1 MiB direct
    buffer per open stream (the fallback pools one each)."""
    data, last, size = segment
    md = segment_metadata(TIP, 100, last, size)
    words = metadata_words(md)
    script = [f"copy {words} {copy_words(data)}", f"parallel {words} threads=6 rounds=2"]
    mapped = run_driver(tmp_path / "a", s3_configs(s3_server), script)
    direct = run_driver(tmp_path / "b", s3_configs(s3_server), script, java_opts=DIRECT_COPY)
    assert mapped[2]["bytes"] == direct[2]["bytes"] == 6 * 2 * size
    assert direct[2]["direct"] >= MiB  # the measurement sees the fallback's buffers
    assert mapped[2]["direct"] < MiB // 2, mapped


def test_a_mapped_range_stays_readable_at_its_address_until_released(s3_server, segment):
    """The engine's side of a mapped stream, called as the Java side calls it: the address
    holds exactly the range it maps (what was asked, up to its chunk's end), while other
    views come and go, after the chunk left the cache and after the tier closed, until the
    stream's next map or unmap releases it."""
    import ctypes

    from engine.remote import broker_plugin as bridge

    data, last, size = segment
    md = segment_metadata(TIP, 100, last, size)
    log = data.log_segment.read_bytes()
    configs = s3_configs(s3_server, **{
        "fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache",
        "fetch.chunk.cache.size": "1000"})  # one chunk: every map evicts the previous one
    configs.pop("engine.venv")
    handle = bridge.plugin_open([v for kv in configs.items() for v in kv])
    try:
        with python_rsm(configs) as rsm:
            rsm.copy_log_segment_data(md, data)
        (first, n1, pin1), (second, n2, pin2), (again, n3, pin3) = (
            bridge.plugin_map(handle, describe(md), 10, 900, True, 0),
            bridge.plugin_map(handle, describe(md), 1500, 1000, False, 0),
            bridge.plugin_map(handle, describe(md), 10, 900, False, 0))
    finally:
        bridge.plugin_close(handle)
    assert (n1, n2, n3) == (900, 500, 900)  # what was asked, up to its chunk's end
    assert ctypes.string_at(first, 900) == log[10:910]
    assert ctypes.string_at(second, 500) == log[1500:2000]
    assert ctypes.string_at(again, 900) == log[10:910]
    assert len({pin1, pin2, pin3}) == 3  # two views of one memory: two pins
    for pin in (pin1, pin2, pin3):
        bridge.plugin_unmap(pin)
    assert not {pin1, pin2, pin3} & set(bridge._pins)


def test_object_store_metrics_are_on_jmx_under_the_plugins_names(s3_server, segment,
                                                                 tmp_path):
    data, last, size = segment
    md = segment_metadata(TIP, 100, last, size)
    words = metadata_words(md)
    out = run_driver(tmp_path / "drv", s3_configs(s3_server),
                     [f"copy {words} {copy_words(data)}",
                      f"fetch {words} out={tmp_path / 'log'}", "jmx"])
    beans = out[3]["beans"]
    rsm = beans["aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics"]
    assert rsm["object-upload-total"] == 3
    assert rsm["object-upload-bytes-total"] >= size
    per_type = beans["aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics,"
                     "object-type=log"]
    assert per_type["object-upload-total"] == 1
    s3 = beans["aiven.kafka.server.tieredstorage.s3:type=s3-client-metrics"]
    assert s3["get-object-requests-total"] >= 1
    assert "throttling-errors-total" in s3


def test_store_errors_are_kafkas_types_with_the_engines_message_and_no_secret(
        s3_server, segment, tmp_path):
    data, last, size = segment
    md = segment_metadata(TIP, 100, last, size)
    words = metadata_words(md)
    with socket_closed() as port:
        configs = s3_configs(s3_server, **{
            "storage.s3.endpoint.url": f"http://127.0.0.1:{port}",
            "storage.aws.secret.access.key": "SECRET-" + uuid.uuid4().hex,
            "storage.s3.api.call.timeout": "2000"})
        out = run_driver(tmp_path / "drv", configs,
                         [f"fetch {words} out={tmp_path / 'x'}",
                          f"copy {words} {copy_words(data)}"])
    for line in out[1:]:
        assert line["error"] == "RemoteStorageException", line
        assert configs["storage.aws.secret.access.key"] not in line["message"]
        assert "127.0.0.1" in line["message"] or md.remote_log_segment_id.id.__str__() in \
            line["message"], line


class socket_closed:
    """A loopback port with nothing listening (bound, then closed)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def __exit__(self, *exc):
        return False


def test_the_jar_setup_installs_in_the_venv_finds_it_without_the_key(segment, tmp_path):
    """A broker switched from the Aiven plugin changes the class name and class path only:
    the jar that setup.sh installs under the venv finds its venv."""
    data, last, size = segment
    md = segment_metadata(TIP, 100, last, size)
    words = metadata_words(md)
    tier = tmp_path / "tier"
    tier.mkdir()
    assert INSTALLED_JAR.is_file(), "scripts/setup.sh installs the plugin into the venv"
    out = run_driver(tmp_path / "drv", {"dirs": str(tier)},
                     [f"copy {words} {copy_words(data)}",
                      f"fetch {words} out={tmp_path / 'log'}"], jar=INSTALLED_JAR)
    assert [line.get("error") for line in out] == [None] * 3, out
    assert (tmp_path / "log").read_bytes() == data.log_segment.read_bytes()
    out = run_driver(tmp_path / "drv2", {"dirs": str(tier)}, [], jar=PLUGIN_JAR)
    assert out[0]["error"] == "ConfigException"
    assert "rsm.config.engine.venv is not set" in out[0]["message"]
    assert str(PLUGIN_JAR) in out[0]["message"]


def test_configure_names_the_venv_key_and_path(tmp_path):
    not_a_venv = tmp_path / "nowhere"
    out = run_driver(tmp_path / "a", {"dirs": str(tmp_path), "engine.venv": str(not_a_venv)},
                     [])
    assert out[0]["error"] == "ConfigException"
    assert f"rsm.config.engine.venv={not_a_venv}" in out[0]["message"]
    assert "not a Python virtual environment" in out[0]["message"]


def test_configure_fails_naming_the_path_when_the_venv_lacks_jep(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True,
                   timeout=120)
    out = run_driver(tmp_path / "a", {"dirs": str(tmp_path), "engine.venv": str(bare)}, [])
    assert out[0]["error"] == "ConfigException"
    assert f"rsm.config.engine.venv={bare}" in out[0]["message"]
    assert "jep is not installed" in out[0]["message"]


def test_configure_fails_naming_the_venv_when_the_engine_cannot_be_imported(tmp_path):
    broken = tmp_path / "shadow" / "engine"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('engine build is broken here')\n")
    env = dict(os.environ, PYTHONPATH=str(broken.parent))
    out = run_driver(tmp_path / "a", {"dirs": str(tmp_path), "engine.venv": str(VENV)}, [],
                     env=env)
    assert out[0]["error"] == "ConfigException"
    assert str(VENV) in out[0]["message"]
    assert "the engine cannot be imported" in out[0]["message"]
    assert "engine build is broken here" in out[0]["message"]


@pytest.mark.parametrize("configs, key", [
    ({"storage.backend.class": S3_BACKEND, "chunk.size": "lots"}, "rsm.config.chunk.size"),
    ({}, "rsm.config.storage.backend.class"),
    ({"dirs": "relative/dir"}, "rsm.config.dirs"),
])
def test_a_bad_setting_fails_configure_naming_its_key(s3_server, tmp_path, configs, key):
    base = dict(s3_server.config()) if "storage.backend.class" in configs else {}
    out = run_driver(tmp_path / "a", {**base, **configs, "engine.venv": str(VENV)}, [])
    assert out[0]["error"] == "ConfigException", out
    assert key in out[0]["message"]
    assert s3_server.secret_key not in out[0]["message"]


def test_configure_refuses_a_venv_whose_jep_is_not_the_jars(tmp_path):
    """The jar's jep classes must be those of the venv's libjep: a venv with another jep
    version fails `configure` naming the key, the path and both versions."""
    import importlib.util

    real_jep = Path(importlib.util.find_spec("jep").submodule_search_locations[0])
    other = tmp_path / "other"
    jep_dir = other / "lib" / "python3.11" / "site-packages" / "jep"
    jep_dir.mkdir(parents=True)
    (other / "bin").mkdir()
    (other / "pyvenv.cfg").write_text((VENV / "pyvenv.cfg").read_text())
    (other / "bin" / "python").symlink_to(VENV / "bin" / "python")
    (jep_dir / "libjep.so").symlink_to(real_jep / "libjep.so")
    (jep_dir / "version.py").write_text("__VERSION__ = '0.0.1'\nVERSION = __VERSION__\n")
    out = run_driver(tmp_path / "a", {"dirs": str(tmp_path), "engine.venv": str(other)}, [])
    assert out[0]["error"] == "ConfigException"
    message = out[0]["message"]
    assert f"rsm.config.engine.venv={other}" in message
    assert "its jep is 0.0.1" in message and "built with jep" in message
