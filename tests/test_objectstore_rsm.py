"""ObjectStorageRemoteStorageManager against a real S3 server (SeaweedFS, tests/s3_server.py):
every transform combination round-trips byte-exact, a bucket assembled by hand to the Aiven
plugin's documented layout reads back, hostile objects are typed errors, failed copies leave
nothing, and the configuration is the plugin's."""

import base64
import json
import os
import uuid

import numpy as np
import obstore
import pytest
import zstandard
from Crypto.Cipher import PKCS1_OAEP
from Crypto.Hash import SHA3_512
from Crypto.PublicKey import RSA
from Crypto.Signature.pss import MGF1
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from fault_proxy import Fault
from objectstore_support import wait_for
from rsm_crash_writer import make_segment, segment_metadata
from test_objectstore_transforms import write_key_pair

from engine.common import Uuid
from engine.config import BrokerConfig, ConfigError
from engine.errors import (
    CorruptRemoteObjectError,
    RemoteEncryptionKeyError,
    RemoteFetchTimeoutError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from engine.remote import IndexType
from engine.remote.factory import create_remote_storage_manager
from engine.remote.metadata import TopicIdPartition
from engine.remote.objectstore import custom_metadata as cm
from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

TIP = TopicIdPartition(Uuid.from_string("lZ6vvmajTWKDBUTV6SQAtQ"), "my-topic", 3)
CHUNK = 1000
INDEX_TYPES = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.PRODUCER_SNAPSHOT,
               IndexType.LEADER_EPOCH, IndexType.TRANSACTION)


@pytest.fixture(scope="module")
def segment(tmp_path_factory):
    """A closed segment at offset 100 with aborted transactions (so a .txnindex)."""
    return make_segment(tmp_path_factory.mktemp("local"), 100, batches=30, aborted=3, seed=7)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    return {name: write_key_pair(d, name) for name in ("k1", "k2")}


def rsm_configs(s3_server, prefix=None, **extra) -> dict:
    configs = dict(s3_server.config())
    configs["key.prefix"] = prefix if prefix is not None else f"t-{uuid.uuid4().hex[:8]}/"
    configs["chunk.size"] = str(CHUNK)
    configs.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return configs


def encryption_configs(keys, active="k1", pairs=("k1", "k2")) -> dict:
    out = {"encryption.enabled": "true", "encryption.key.pair.id": active,
           "encryption.key.pairs": ",".join(pairs)}
    for name in pairs:
        public, private, _ = keys[name]
        out[f"encryption.key.pairs.{name}.public.key.file"] = public
        out[f"encryption.key.pairs.{name}.private.key.file"] = private
    return out


def make_rsm(configs) -> ObjectStorageRemoteStorageManager:
    rsm = ObjectStorageRemoteStorageManager()
    rsm.configure(configs)
    return rsm


def copy(rsm, segment, segment_id=None):
    data, last, size = segment
    md = segment_metadata(TIP, 100, last, size, segment_id)
    custom = rsm.copy_log_segment_data(md, data)
    return segment_metadata(TIP, 100, last, size, md.remote_log_segment_id.id, custom)


def listed(s3_server, prefix):
    return sorted(m["path"] for page in obstore.list(s3_server.raw_store(), prefix=prefix)
                  for m in page)


def raw_get(s3_server, key) -> bytes:
    return bytes(obstore.get(s3_server.raw_store(), key).bytes())


def expected_index(data, index_type):
    return {IndexType.OFFSET: data.offset_index.read_bytes(),
            IndexType.TIMESTAMP: data.time_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot.read_bytes(),
            IndexType.LEADER_EPOCH: data.leader_epoch_index,
            IndexType.TRANSACTION: data.transaction_index.read_bytes()}[index_type]


def check_reads(rsm, md, data):
    log = data.log_segment.read_bytes()
    assert rsm.read_range(md, 0, len(log)) == log
    for start, end in ((0, 1), (999, 1001), (1500, 4321), (len(log) - 5, len(log)),
                       (CHUNK * 3, CHUNK * 4), (7, 7)):
        assert rsm.read_range(md, start, end) == log[start:end], (start, end)
    buf = bytearray(2500)
    assert rsm.read_range_into(md, 1234, buf) == 2500 and bytes(buf) == log[1234:3734]
    tail = bytearray(10)
    assert rsm.read_range_into(md, len(log) - 10, tail) == 10 and tail == log[-10:]
    view = rsm.map_range(md, 10, 2010)
    assert view.readonly and bytes(view) == log[10:2010]
    with rsm.fetch_log_segment(md, 0) as stream:
        assert stream.read() == log
    with rsm.fetch_log_segment(md, 1500, 2999) as stream:
        assert stream.read() == log[1500:3000]
    for index_type in INDEX_TYPES:
        assert rsm.fetch_index_bytes(md, index_type) == expected_index(data, index_type)
        with rsm.fetch_index(md, index_type) as stream:
            assert stream.read() == expected_index(data, index_type)
    # the contract's range rules: ValueError outside the segment
    with pytest.raises(ValueError, match="outside remote segment"):
        rsm.read_range(md, 0, len(log) + 1)
    with pytest.raises(ValueError, match="outside remote segment"):
        rsm.read_range_into(md, len(log) - 10, buf)


@pytest.mark.parametrize("compression,encryption", [(False, False), (True, False),
                                                    (False, True), (True, True)],
                         ids=["plain", "zstd", "encrypted", "zstd+encrypted"])
def test_each_transform_combination_round_trips(s3_server, segment, keys, compression,
                                                encryption):
    configs = rsm_configs(s3_server, compression_enabled=str(compression).lower())
    if encryption:
        configs.update(encryption_configs(keys))
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        data = segment[0]
        prefix = configs["key.prefix"]
        main = (f"{prefix}my-topic-lZ6vvmajTWKDBUTV6SQAtQ/3/00000000000000000100-"
                f"{md.remote_log_segment_id.id}")
        assert listed(s3_server, prefix) == sorted(main + s for s in (".indexes", ".log",
                                                                      ".rsm-manifest"))
        manifest = json.loads(raw_get(s3_server, main + ".rsm-manifest"))
        assert manifest["compression"] is compression
        assert manifest["chunkIndex"]["type"] == ("variable" if compression else "fixed")
        assert ("encryption" in manifest) is encryption
        if encryption:
            assert manifest["encryption"]["dataKey"].startswith("k1:")
            assert len(base64.b64decode(manifest["encryption"]["aad"])) == 32
        stored_log = raw_get(s3_server, main + ".log")
        log = data.log_segment.read_bytes()
        if not compression and not encryption:
            assert stored_log == log  # plain mode: the Kafka segment itself
            assert raw_get(s3_server, main + ".indexes") == b"".join(
                expected_index(data, t) for t in INDEX_TYPES)
        else:
            assert stored_log != log
        assert md.custom_metadata is None
        check_reads(rsm, md, data)
        # a second instance (no caches) reads it too
        with make_rsm(configs) as fresh:
            check_reads(fresh, md, data)
        if encryption:  # one without the key ring cannot, and says which key it needs
            plain_configs = {k: v for k, v in configs.items()
                             if not k.startswith("encryption.")}
            with make_rsm(plain_configs) as without, pytest.raises(
                    RemoteEncryptionKeyError, match="key pair 'k1', but encryption is not"):
                without.read_range(md, 0, 10)


def test_large_segment_multipart_upload_and_parallel_reads(s3_server, tmp_path, keys):
    """A segment over the part size goes up as a multipart upload of transformed chunks;
    reads across many chunks come back exact."""
    data, last, size = make_segment(tmp_path / "big", 0, batches=60, records=50,
                                    value_size=2000, seed=3)
    assert size > 5 * 1024 * 1024
    configs = rsm_configs(s3_server, chunk_size=64 * 1024, compression_enabled="true",
                          storage_s3_multipart_upload_part_size=5 * 1024 * 1024,
                          fetch_max_request_bytes=256 * 1024)
    configs.update(encryption_configs(keys))
    with make_rsm(configs) as rsm:
        md0 = segment_metadata(TIP, 0, last, size)
        rsm.copy_log_segment_data(md0, data)
        log = data.log_segment.read_bytes()
        assert rsm.read_range(md0, 0, size) == log
        assert rsm.read_range(md0, 100_000, 3_000_000) == log[100_000:3_000_000]


def test_retried_copy_overwrites_and_delete_is_idempotent(s3_server, segment):
    configs = rsm_configs(s3_server)
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        again = copy(rsm, segment, md.remote_log_segment_id.id)
        check_reads(rsm, again, segment[0])
        assert len(listed(s3_server, configs["key.prefix"])) == 3
        rsm.delete_log_segment_data(md)
        assert listed(s3_server, configs["key.prefix"]) == []
        rsm.delete_log_segment_data(md)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.read_range(md, 0, 10)


def test_failed_copy_deletes_what_it_wrote(s3_server, fault_proxy, segment):
    configs = rsm_configs(s3_server, storage_api_call_max_retries=0)
    configs["storage.s3.endpoint.url"] = fault_proxy.endpoint
    with make_rsm(configs) as rsm:
        fault_proxy.add(Fault("status", method="PUT", path_contains=".rsm-manifest",
                              status=500, times=None))
        with pytest.raises(RemoteStorageError, match="rsm-manifest"):
            copy(rsm, segment)
        # .log and .indexes were written, then deleted
        assert fault_proxy.requests("PUT", ".log") and fault_proxy.requests("PUT", ".indexes")
        assert listed(s3_server, configs["key.prefix"]) == []
        fault_proxy.clear()
        md = copy(rsm, segment)
        check_reads(rsm, md, segment[0])


def test_missing_transaction_index_is_not_found(s3_server, tmp_path):
    data, last, size = make_segment(tmp_path, 0, batches=5)
    assert data.transaction_index is None
    with make_rsm(rsm_configs(s3_server)) as rsm:
        md = segment_metadata(TIP, 0, last, size)
        rsm.copy_log_segment_data(md, data)
        with pytest.raises(RemoteResourceNotFoundError, match="transaction index"):
            rsm.fetch_index_bytes(md, IndexType.TRANSACTION)
        assert rsm.fetch_index_bytes(md, IndexType.OFFSET) == data.offset_index.read_bytes()


def test_compression_heuristic_skips_compressed_segments(s3_server, tmp_path):
    from engine.log.segment import LogSegment
    from engine.records import CompressionType, RecordBatchBuilder
    from engine.remote import LogSegmentData

    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=1024, max_index_size=1 << 16)
    b = RecordBatchBuilder(compression_type=CompressionType.ZSTD)
    b.extend([b"x" * 100] * 50)
    seg.append(49, 0, 49, b.build())
    seg.on_become_inactive_segment()
    size = seg.size_in_bytes
    seg.close()
    data = LogSegmentData(tmp_path / f"{0:020d}.log", tmp_path / f"{0:020d}.index",
                          tmp_path / f"{0:020d}.timeindex", None, None, b"0\n0\n")
    configs = rsm_configs(s3_server, compression_enabled="true",
                          compression_heuristic_enabled="true")
    with make_rsm(configs) as rsm:
        md = segment_metadata(TIP, 0, 49, size)
        rsm.copy_log_segment_data(md, data)
        key = rsm.keys.key(md, "rsm-manifest")
        manifest = json.loads(raw_get(s3_server, key))
        assert manifest["compression"] is False and manifest["chunkIndex"]["type"] == "fixed"
        assert raw_get(s3_server, rsm.keys.key(md, "log")) == data.log_segment.read_bytes()
        assert rsm.fetch_index_bytes(md, IndexType.PRODUCER_SNAPSHOT) == b""


def test_custom_metadata_fields_and_object_key_override(s3_server, segment):
    configs = rsm_configs(s3_server,
                          custom_metadata_fields_include="REMOTE_SIZE,OBJECT_PREFIX,OBJECT_KEY")
    prefix = configs["key.prefix"]
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        fields = cm.decode_custom_metadata(md.custom_metadata)
        objects = {m["path"]: m["size"] for page in obstore.list(
            s3_server.raw_store(), prefix=prefix) for m in page}
        assert fields[cm.REMOTE_SIZE] == sum(objects.values())
        assert fields[cm.OBJECT_PREFIX] == prefix
        assert prefix + fields[cm.OBJECT_KEY] + ".log" in objects
        # the custom metadata moves .log and .indexes (not the manifest) elsewhere
        store = s3_server.raw_store()
        for suffix in (".log", ".indexes"):
            src = prefix + fields[cm.OBJECT_KEY] + suffix
            obstore.put(store, "moved/x" + suffix, raw_get(s3_server, src))
            obstore.delete(store, src)
        custom = cm.encode_custom_metadata({cm.OBJECT_PREFIX: "moved/",
                                            cm.OBJECT_KEY: "x"})
        data, last, size = segment
        elsewhere = segment_metadata(TIP, 100, last, size, md.remote_log_segment_id.id, custom)
        check_reads(rsm, elsewhere, data)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.read_range(md, 0, 10)
        obstore.delete(store, ["moved/x.log", "moved/x.indexes"])


# ---- a bucket assembled by hand ------------------------------------------------------------

def _oaep_wrap(public_pem_path, key: bytes) -> bytes:
    with open(public_pem_path, "rb") as f:
        public = RSA.import_key(f.read())
    return PKCS1_OAEP.new(public, hashAlgo=SHA3_512,
                          mgfunc=lambda s, n: MGF1(s, n, SHA3_512)).encrypt(key)


def _chunk_sizes_frame(sizes) -> str:
    """ChunkSizesBinaryCodec written out from the plugin's description, in a zstd frame."""
    body = sizes[:-1]
    base = min(body)
    width = max(1, max((s - base).bit_length() for s in body) + 7 >> 3)
    raw = (len(sizes).to_bytes(4, "big") + base.to_bytes(4, "big") + bytes([width])
           + b"".join((s - base).to_bytes(width, "big") for s in body)
           + sizes[-1].to_bytes(4, "big"))
    return base64.b64encode(zstandard.ZstdCompressor(write_content_size=True)
                            .compress(raw)).decode()


@pytest.mark.parametrize("mode", ["plain", "zstd+encrypted"])
def test_bucket_assembled_by_hand_reads_back(s3_server, segment, keys, mode):
    """Objects written with the store client alone, to the documented layout (no engine
    writer code), read back through the RSM."""
    data, last, size = segment
    prefix = f"hand-{uuid.uuid4().hex[:8]}/"
    segment_id = Uuid.random()
    main = f"{prefix}my-topic-{TIP.topic_id}/3/{100:020d}-{segment_id}"
    log = data.log_segment.read_bytes()
    indexes = [expected_index(data, t) for t in INDEX_TYPES]
    store = s3_server.raw_store()
    manifest = {"version": "1"}
    if mode == "plain":
        n = -(-len(log) // CHUNK)
        obstore.put(store, main + ".log", log)
        stored_indexes = indexes
        manifest["chunkIndex"] = {"type": "fixed", "originalChunkSize": CHUNK,
                                  "originalFileSize": len(log), "transformedChunkSize": CHUNK,
                                  "finalTransformedChunkSize": len(log) - (n - 1) * CHUNK}
    else:
        dek, aad = os.urandom(32), os.urandom(32)
        aes = AESGCM(dek)

        def seal(b):
            iv = os.urandom(12)
            return iv + aes.encrypt(iv, b, aad)

        chunks = [seal(zstandard.ZstdCompressor(write_content_size=True).compress(
            log[i:i + CHUNK])) for i in range(0, len(log), CHUNK)]
        obstore.put(store, main + ".log", b"".join(chunks))
        stored_indexes = [seal(i) if i else b"" for i in indexes]
        manifest["chunkIndex"] = {"type": "variable", "originalChunkSize": CHUNK,
                                  "originalFileSize": len(log),
                                  "transformedChunks": _chunk_sizes_frame(
                                      [len(c) for c in chunks])}
    positions = np.cumsum([0] + [len(i) for i in stored_indexes]).tolist()
    names = ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction")
    manifest["segmentIndexes"] = {name: {"position": positions[i],
                                         "size": len(stored_indexes[i])}
                                  for i, name in enumerate(names)}
    manifest["compression"] = mode != "plain"
    if mode != "plain":
        wrapped = _oaep_wrap(keys["k2"][0], dek)
        manifest["encryption"] = {"dataKey": "k2:" + base64.b64encode(wrapped).decode(),
                                  "aad": base64.b64encode(aad).decode()}
    manifest["remoteLogSegmentMetadata"] = {"anything": ["is", "ignored"]}
    obstore.put(store, main + ".indexes", b"".join(stored_indexes))
    obstore.put(store, main + ".rsm-manifest", json.dumps(manifest).encode())

    configs = rsm_configs(s3_server, prefix=prefix)
    configs.update(encryption_configs(keys))  # active k1; the segment is under k2
    with make_rsm(configs) as rsm:
        md = segment_metadata(TIP, 100, last, size, segment_id)
        check_reads(rsm, md, data)
    if mode != "plain":
        configs.update(encryption_configs(keys, active="k1", pairs=("k1",)))
        for k in list(configs):
            if k.startswith("encryption.key.pairs.k2."):
                del configs[k]
        with make_rsm(configs) as rsm, pytest.raises(RemoteEncryptionKeyError,
                                                     match="'k2', which is not in"):
            rsm.read_range(md, 0, 10)
        # a damaged chunk: an error naming the object and chunk, never wrong bytes
        stored = bytearray(b"".join(chunks))
        stored[len(chunks[0]) + len(chunks[1]) + 40] ^= 1
        obstore.put(store, main + ".log", bytes(stored))
        configs.update(encryption_configs(keys))
        with make_rsm(configs) as rsm:
            assert rsm.read_range(md, 0, CHUNK) == log[:CHUNK]
            with pytest.raises(CorruptRemoteObjectError, match=r"\.log chunk 2: AES-GCM") as e:
                rsm.read_range(md, 0, 5 * CHUNK)
            assert e.value.chunk == 2 and e.value.object_key == main + ".log"


def test_hostile_manifest_objects(s3_server, segment):
    configs = rsm_configs(s3_server)
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        key = rsm.keys.key(md, "rsm-manifest")
        store = s3_server.raw_store()
        good = raw_get(s3_server, key)
        obj = json.loads(good)
        obj["chunkIndex"]["finalTransformedChunkSize"] += 1
        for bad, match in ((b"{not json", "bad JSON"),
                           (json.dumps(obj).encode(), "finalTransformedChunkSize"),
                           (b"x" * (17 << 20), "more than the 16777216")):
            obstore.put(store, key, bad)
            with make_rsm(configs) as fresh:
                with pytest.raises((CorruptRemoteObjectError, RemoteStorageError),
                                   match=match) as info:
                    fresh.read_range(md, 0, 10)
                assert key in str(info.value)
        # the .log shorter than the manifest says: an error, never short bytes
        obstore.put(store, key, good)
        log_key = rsm.keys.key(md, "log")
        obstore.put(store, log_key, raw_get(s3_server, log_key)[:-100])
        with make_rsm(configs) as fresh, pytest.raises(RemoteStorageError):
            fresh.read_range(md, 0, segment[2])


# ---- configuration -------------------------------------------------------------------------

def test_config_errors_name_the_key(s3_server, keys, tmp_path):
    base = rsm_configs(s3_server)
    cases = [
        ({"chunk.size": "0"}, "chunk.size", r"\[1, 1073741823\]"),
        ({"compression.heuristic.enabled": "true"}, "compression.heuristic.enabled",
         "needs compression.enabled"),
        ({"compression.enabled": "yes"}, "compression.enabled", "true or false"),
        ({"chunk.sise": "5"}, "chunk.sise", "did you mean 'chunk.size'"),
        ({"custom.metadata.fields.include": "REMOTE_SIZE,NOPE"},
         "custom.metadata.fields.include", "'NOPE'"),
        ({"fetch.chunk.cache.class": "x.Y"}, "fetch.chunk.cache.class", "MemoryChunkCache"),
        ({"segment.format": "iceberg"}, "segment.format", "only the kafka"),
        ({"encryption.enabled": "true"}, "encryption.key.pair.id", "required"),
        (dict(encryption_configs(keys), **{"encryption.key.pairs": "k2"}),
         "encryption.key.pairs", "'k1'"),
        (dict(encryption_configs(keys), **{"encryption.key.pairs.k2.private.key.file":
                                           str(tmp_path / "nope.pem")}),
         "encryption.key.pairs.k2.private.key.file", "Errno 2"),
        (dict(encryption_configs(keys), **{"encryption.key.pairs.k1.private.key.file":
                                           keys["k2"][1]}),
         "encryption.key.pairs.k1.private.key.file", "not the private key"),
    ]
    without = {k: v for k, v in base.items() if k != "chunk.size"}
    with make_rsm(without) as rsm:
        assert rsm.config.chunk_size == 8 << 20  # reads.DEFAULT_CHUNK_SIZE
    for change, key, match in cases:
        configs = dict(base)
        for k, v in change.items():
            if v is None:
                configs.pop(k, None)
            else:
                configs[k] = v
        with pytest.raises(ConfigError, match=match) as info:
            make_rsm(configs)
        assert info.value.key == key, (key, info.value)
        assert s3_server.secret_key not in str(info.value)
    assert listed(s3_server, base["key.prefix"]) == []  # nothing written


def test_secrets_stay_out_of_repr_and_errors(s3_server, fault_proxy, segment):
    configs = rsm_configs(s3_server, storage_api_call_max_retries=0)
    configs["storage.s3.endpoint.url"] = fault_proxy.endpoint
    with make_rsm(configs) as rsm:
        assert s3_server.secret_key not in repr(rsm)
        assert s3_server.secret_key not in repr(rsm.config)
        fault_proxy.add(Fault("status", method="PUT", status=500, times=None))
        with pytest.raises(RemoteStorageError) as info:
            copy(rsm, segment)
        assert s3_server.secret_key not in str(info.value)
        assert s3_server.access_key not in repr(rsm.store.config)


@pytest.mark.parametrize("class_name", [
    "engine.remote.ObjectStorageRemoteStorageManager",
    "io.aiven.kafka.tieredstorage.RemoteStorageManager",
    "engine.remote.objectstore.rsm.ObjectStorageRemoteStorageManager",
])
def test_factory_loads_plugin_broker_files(s3_server, segment, class_name):
    """A broker config written for the Aiven plugin (its class names and keys) loads."""
    props = {"broker.id": "1", "log.dirs": "/tmp/unused",
             "remote.log.storage.system.enable": "true",
             "remote.log.storage.manager.class.name": class_name,
             "rsm.config.storage.backend.class":
                 "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
             "rsm.config.fetch.chunk.cache.class":
                 "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache",
             "rsm.config.fetch.chunk.cache.size": "104857600"}
    props.update({"rsm.config." + k: v for k, v in rsm_configs(s3_server).items()})
    rsm = create_remote_storage_manager(BrokerConfig(props))
    try:
        assert isinstance(rsm, ObjectStorageRemoteStorageManager)
        assert rsm.config.cache.kind == "memory"
        check_reads(rsm, copy(rsm, segment), segment[0])
    finally:
        rsm.close()
    props["rsm.config.chunk.sise"] = "1"
    with pytest.raises(ConfigError) as info:
        create_remote_storage_manager(BrokerConfig(props))
    assert info.value.key == "rsm.config.chunk.sise"


def test_chunk_cache_serves_repeat_reads_and_survives_a_restart(s3_server, fault_proxy,
                                                                segment, tmp_path, keys):
    """With the plugin's DiskChunkCache class, a second read of the same chunks makes no
    GET, and neither does a read by a new instance on the same cache dirs; chunks of a
    re-upload under another manifest are not served from the old entries."""
    configs = rsm_configs(s3_server, compression_enabled="true")
    configs.update(encryption_configs(keys))
    configs.update({"storage.s3.endpoint.url": fault_proxy.endpoint,
                    "fetch.chunk.cache.class":
                        "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache",
                    "fetch.chunk.cache.size": str(64 << 20),
                    "fetch.chunk.cache.path": f"{tmp_path / 'c1'},{tmp_path / 'c2'}"})
    log = segment[0].log_segment.read_bytes()
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        assert rsm.read_range(md, 0, len(log)) == log
        gets = len(fault_proxy.requests("GET", ".log"))
        assert 1 <= gets <= 4 * len(range(0, len(log), CHUNK))
        assert rsm.read_range(md, 2500, 7000) == log[2500:7000]
        assert len(fault_proxy.requests("GET", ".log")) == gets
        assert rsm.chunk_cache.flush()
    with make_rsm(configs) as again:
        assert again.read_range(md, 0, len(log)) == log
        assert len(fault_proxy.requests("GET", ".log")) == gets
        # the same segment id copied again: another manifest, so another cache identity
        md2 = copy(again, segment, md.remote_log_segment_id.id)
        assert again.read_range(md2, 0, 10) == log[:10]
        assert len(fault_proxy.requests("GET", ".log")) == gets + 1


@pytest.mark.parametrize("compression,encryption", [(False, False), (True, True)])
def test_empty_segment(s3_server, tmp_path, keys, compression, encryption):
    """A 0-byte .log is one empty chunk (plain mode's fixed index; compression is skipped
    for it, as the plugin cannot write an empty compressed index)."""
    data, last, _ = make_segment(tmp_path, 0, batches=1)
    data.log_segment.write_bytes(b"")
    configs = rsm_configs(s3_server, compression_enabled=str(compression).lower())
    if encryption:
        configs.update(encryption_configs(keys))
    with make_rsm(configs) as rsm:
        md = segment_metadata(TIP, 0, last, 0)
        rsm.copy_log_segment_data(md, data)
        manifest = json.loads(raw_get(s3_server, rsm.keys.key(md, "rsm-manifest")))
        assert manifest["compression"] is False
        assert manifest["chunkIndex"]["originalFileSize"] == 0
        assert raw_get(s3_server, rsm.keys.key(md, "log")) == b""
        assert rsm.read_range(md, 0, 0) == b""
        assert rsm.read_range_into(md, 0, bytearray(0)) == 0
        with rsm.fetch_log_segment(md, 0) as stream:
            assert stream.read() == b""
        assert rsm.fetch_index_bytes(md, IndexType.OFFSET) == data.offset_index.read_bytes()


def test_slow_store_read_fails_at_the_fetch_deadline(s3_server, fault_proxy, segment):
    """A store slower than `fetch.chunk.cache.get.timeout.ms` makes the read fail with
    RemoteFetchTimeoutError naming the object (the deadline, not the store's own timeouts,
    ends it); once the store answers again the same read succeeds."""
    configs = rsm_configs(s3_server, fetch_chunk_cache_get_timeout_ms=300)
    configs["storage.s3.endpoint.url"] = fault_proxy.endpoint
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        rsm.fetch_index_bytes(md, IndexType.OFFSET)  # manifest cached
        fault_proxy.add(Fault("delay", method="GET", path_contains=".log", delay_s=2.0,
                              times=1))
        with pytest.raises(RemoteFetchTimeoutError, match="did not finish") as info:
            rsm.read_range(md, 0, 100)
        assert rsm.keys.key(md, "log") in str(info.value)
        assert rsm.read_range(md, 0, 100) == segment[0].log_segment.read_bytes()[:100]
        # a read made once (its exact bytes, no chunk) keeps the same deadline
        fault_proxy.add(Fault("delay", method="GET", path_contains=".log", delay_s=2.0,
                              times=1))
        with pytest.raises(RemoteFetchTimeoutError, match="did not finish"):
            rsm.read_range_once(md, 50, 150)
        assert rsm.read_range_once(md, 50, 150) == segment[0].log_segment.read_bytes()[50:150]


@pytest.mark.parametrize("compression", [False, True])
def test_copy_of_missing_files_names_them_and_leaves_nothing(s3_server, tmp_path, compression):
    import dataclasses
    import errno

    data, last, size = make_segment(tmp_path, 0, batches=3)
    configs = rsm_configs(s3_server, compression_enabled=str(compression).lower())
    with make_rsm(configs) as rsm:
        md = segment_metadata(TIP, 0, last, size)
        gone = dataclasses.replace(data, log_segment=tmp_path / "missing.log")
        with pytest.raises(RemoteStorageError, match="missing.log") as info:
            rsm.copy_log_segment_data(md, gone)
        assert info.value.errno == errno.ENOENT
        gone = dataclasses.replace(data, time_index=tmp_path / "missing.timeindex")
        with pytest.raises(RemoteStorageError, match="missing.timeindex") as info:
            rsm.copy_log_segment_data(md, gone)
        assert info.value.errno == errno.ENOENT
        assert listed(s3_server, configs["key.prefix"]) == []


def test_map_range_if_open_serves_only_what_needs_no_io(s3_server, fault_proxy, segment):
    """map_range_if_open answers from the cached manifest and the chunk cache's memory
    alone: None before the chunks were read, the bytes after, and never a request."""
    configs = rsm_configs(s3_server, compression_enabled="true",
                          fetch_chunk_cache_class="memory",
                          fetch_chunk_cache_size=str(64 << 20))
    configs["storage.s3.endpoint.url"] = fault_proxy.endpoint
    log = segment[0].log_segment.read_bytes()
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        requests = len(fault_proxy.requests())
        assert rsm.map_range_if_open(md, 0, 100) is None  # manifest not loaded
        assert len(fault_proxy.requests()) == requests
        assert rsm.read_range(md, 1500, 1600) == log[1500:1600]  # chunk 1 now cached
        requests = len(fault_proxy.requests())
        view = rsm.map_range_if_open(md, 1500, 1600)
        assert view.readonly and bytes(view) == log[1500:1600]
        assert rsm.map_range_if_open(md, 900, 1100) is None  # chunk 0 is not
        assert rsm.read_range(md, 0, 3 * CHUNK) == log[:3 * CHUNK]
        requests = len(fault_proxy.requests())
        assert bytes(rsm.map_range_if_open(md, 500, 2500)) == log[500:2500]
        assert rsm.map_range_if_open(md, 0, len(log) + 1) is None
        assert len(fault_proxy.requests()) == requests
    without_cache = rsm_configs(s3_server)
    with make_rsm(without_cache) as rsm:
        md = copy(rsm, segment)
        rsm.read_range(md, 0, 100)
        assert rsm.map_range_if_open(md, 0, 100) is None


def test_views_of_cached_chunks_count_the_requested_bytes_as_reads_do(s3_server, segment):
    """A range served from the chunk cache's memory (`map_range_if_open`, and `map_range`,
    which takes that path when it can) counts `segment_fetch_requested_bytes` as
    `read_range` counts it, so the plugin's metric does not depend on the path a read took."""
    from prometheus_client import CollectorRegistry

    configs = rsm_configs(s3_server, fetch_chunk_cache_class="memory",
                          fetch_chunk_cache_size=str(64 << 20))
    log = segment[0].log_segment.read_bytes()
    registry = CollectorRegistry()
    with make_rsm(configs) as rsm:
        rsm.register_metrics(registry)
        md = copy(rsm, segment)

        def requested():
            return registry.get_sample_value("segment_fetch_requested_bytes_total")

        assert rsm.read_range(md, 0, 3 * CHUNK) == log[:3 * CHUNK]
        assert requested() == 3 * CHUNK
        assert bytes(rsm.map_range_if_open(md, 100, 600)) == log[100:600]
        assert requested() == 3 * CHUNK + 500
        assert bytes(rsm.map_range(md, 500, 2500)) == log[500:2500]
        assert requested() == 3 * CHUNK + 2500


def test_a_deleted_segment_is_not_served_from_memory(s3_server, segment):
    """Reads find a segment read moments ago by its id alone; deleting the segment drops
    that with its manifest, so no read serves it after."""
    configs = rsm_configs(s3_server, fetch_chunk_cache_class="memory",
                          fetch_chunk_cache_size=str(64 << 20))
    log = segment[0].log_segment.read_bytes()
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        assert rsm.read_range(md, 0, 100) == log[:100]
        assert bytes(rsm.map_range_if_open(md, 0, 100)) == log[:100]
        rsm.delete_log_segment_data(md)
        assert rsm.map_range_if_open(md, 0, 100) is None
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.read_range(md, 0, 100)


@pytest.mark.parametrize("whole", [True, False])
def test_index_reads_take_one_get(s3_server, fault_proxy, segment, keys, monkeypatch, whole):
    """Small `.indexes` objects come in one GET for every index; larger ones one GET per
    index; either way each index is fetched once and GCM-checked."""
    import engine.remote.objectstore.rsm as rsm_module

    if not whole:
        monkeypatch.setattr(rsm_module, "_WHOLE_INDEXES_BYTES", 0)
    configs = rsm_configs(s3_server)
    configs.update(encryption_configs(keys))
    configs["storage.s3.endpoint.url"] = fault_proxy.endpoint
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        for _ in range(2):
            for index_type in INDEX_TYPES:
                assert rsm.fetch_index_bytes(md, index_type) == expected_index(segment[0],
                                                                               index_type)
        gets = fault_proxy.requests("GET", ".indexes")
        stored = sum(1 for t in INDEX_TYPES if expected_index(segment[0], t))
        assert len(gets) == (1 if whole else stored)


def test_metadata_larger_than_the_manifest_is_corruption(s3_server, segment):
    """Segment metadata claiming more bytes than the manifest holds: reads past the
    manifest's end are CorruptRemoteObjectError naming the object, never short bytes."""
    data, last, size = segment
    with make_rsm(rsm_configs(s3_server)) as rsm:
        md = copy(rsm, segment)
        bigger = segment_metadata(TIP, 100, last, size + 50, md.remote_log_segment_id.id)
        assert rsm.read_range(bigger, 0, 10) == data.log_segment.read_bytes()[:10]
        with pytest.raises(CorruptRemoteObjectError, match=f"manifest holds {size} bytes"):
            rsm.read_range(bigger, 0, size + 50)


def test_warm_reads_are_served_on_the_callers_thread(s3_server, tmp_path):
    """Through the RemoteLogManager: once a consumer has read the tiered segments (chunks in
    the memory chunk cache, manifests and indexes cached), reading them again needs no
    storage I/O, so no read goes to the reader pool, and the records are the same."""
    from test_tiered_scenarios import Broker

    broker = Broker(tmp_path, "log.local.retention.bytes=1\n"
                              "rsm.config.fetch.chunk.cache.class=memory\n"
                              "rsm.config.fetch.chunk.cache.size=67108864\n",
                    s3_server=s3_server)
    try:
        broker.create("t", remote_storage_enable=True)
        broker.produce("t", batches=12, records=3)
        broker.tier()
        first, remote = broker.consume("t", max_bytes=4096)
        assert remote >= 3
        submitted = []
        submit = broker.rlm.reader_pool.submit
        broker.rlm.reader_pool.submit = lambda work: submitted.append(1) or submit(work)
        again, remote_again = broker.consume("t", max_bytes=4096)
        assert again == first and remote_again == remote
        assert submitted == []
    finally:
        broker.close()


def test_a_failing_store_leaves_local_work_alone_and_copies_resume(s3_server, fault_proxy,
                                                                  tmp_path):
    """Every PUT answered 503: the RLM's copies fail with a store error and leave nothing
    FINISHED and no object; appends and local reads go on; once the store answers again
    the copies resume and every offset reads back."""
    import types

    from test_tiered_scenarios import Broker, expected

    proxied = types.SimpleNamespace(
        config=lambda: s3_server.config(endpoint=fault_proxy.endpoint),
        raw_store=s3_server.raw_store)
    broker = Broker(tmp_path, "log.local.retention.bytes=1\n"
                              "rsm.config.storage.api.call.max.retries=0\n"
                              "remote.log.manager.task.retry.backoff.ms=1\n",
                    s3_server=proxied)
    try:
        broker.create("t", remote_storage_enable=True)
        broker.produce("t", batches=9)
        fault_proxy.add(Fault("status", method="PUT", status=503, times=None))
        summary = broker.rlm.run_once()
        assert summary.copied_segments == 0 and summary.errors
        assert any("503" in e or "throttl" in e.lower() or "slow" in e.lower()
                   for e in summary.errors), summary.errors
        assert broker.remote_segments("t") == [] and broker.tiered_objects() == []
        broker.produce("t", batches=3)  # appends and local reads are unaffected
        assert broker.consume("t") == (expected("t", 0, 0, 36), 0)
        fault_proxy.clear()
        totals = broker.tier()
        assert totals["copied"] >= 3
        records, remote = broker.consume("t")
        assert records == expected("t", 0, 0, 36) and remote >= 3
    finally:
        broker.close()


def test_batch_crcs_are_declared_checked_only_over_cached_checked_chunks(
        s3_server, segment, tmp_path):
    """With a chunk cache, `verifies_batch_crcs` turns true once a read reached the
    segment's end and a background pass found every batch CRC good over the cached chunks
    (batches straddle the 1000-byte chunks); a chunk fetched from the store again ends it;
    a segment with a bad batch CRC never gets it."""
    import dataclasses

    data, last, size = segment
    configs = rsm_configs(s3_server, fetch_chunk_cache_class="memory",
                          fetch_chunk_cache_size=str(size * 3 // 2))
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        assert not rsm.verifies_batch_crcs(md)
        rsm.read_range(md, 0, size // 2)
        assert not rsm.verifies_batch_crcs(md)  # the end not reached: no pass yet
        rsm.read_range(md, size // 2, size)
        wait_for(lambda: rsm.verifies_batch_crcs(md), "the batch CRC pass")

        other = copy(rsm, segment)  # another upload: reading it evicts the first's chunks
        rsm.read_range(other, 0, size)
        assert rsm.verifies_batch_crcs(md)  # evicted, not refetched: nothing served changed
        assert rsm.read_range(md, 0, 100) == data.log_segment.read_bytes()[:100]
        assert not rsm.verifies_batch_crcs(md)  # chunk 0 came from the store again

        raw = bytearray(data.log_segment.read_bytes())
        raw[size // 2 + 100] ^= 0x01  # inside a batch: its CRC fails, the framing holds
        damaged = tmp_path / data.log_segment.name
        damaged.write_bytes(raw)
        bad = copy(rsm, (dataclasses.replace(data, log_segment=damaged), last, size))
        rsm.read_range(bad, 0, size)
        wait_for(lambda: not rsm._verdicts._checking, "the batch CRC pass")
        assert not rsm.verifies_batch_crcs(bad)
    with make_rsm(rsm_configs(s3_server)) as rsm:  # no chunk cache: never
        md = copy(rsm, segment)
        rsm.read_range(md, 0, size)
        assert not rsm.verifies_batch_crcs(md)


class _ChunkDict:
    """The chunk cache's `get` over a dict of chunk bytes (None: not cached)."""

    def __init__(self, chunks):
        self.chunks = chunks

    def get(self, key, background=False):
        return self.chunks.get(key.index)


@pytest.mark.parametrize("chunk_size", [7, 100, 333, 4096, 1 << 20])
def test_the_batch_crc_pass_walks_chunks_of_any_size_in_place(chunk_size):
    """Batches straddling one chunk boundary, several (a batch bigger than a chunk), or none:
    the pass finds every CRC good; a flipped bit in any batch, a cut tail, a missing chunk or
    a lying size field make it fail, never raise."""
    from objectstore_support import plain_segment

    from engine._native.records import scan
    from engine.errors import KafkaEngineError
    from engine.records.sample import sample_batches
    from engine.remote.objectstore.verdicts import BatchCrcVerdicts

    data = b"".join(sample_batches(60, batch_size=7, seed=chunk_size))

    def passes(blob: bytes, drop=None) -> bool:
        seg = plain_segment("k.log", len(blob), chunk_size)
        chunks = {i: blob[i * chunk_size:(i + 1) * chunk_size]
                  for i in range(seg.index.chunk_count) if i != drop}
        verdicts = BatchCrcVerdicts(_ChunkDict(chunks), pool=None)
        try:
            return verdicts._batches_check_out(seg)
        except KafkaEngineError:  # framing the scan refuses: _check takes it as not good
            return False

    assert passes(data)
    rows, _ = scan(data, False)
    # a bit inside the records of the first, a middle and the last batch (CRC-covered)
    for at in (int(rows[i]["position"]) + 70 for i in (0, len(rows) // 2, len(rows) - 1)):
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        assert not passes(bytes(flipped)), at
    assert not passes(data[:-5])
    assert not passes(data, drop=len(data) // chunk_size // 2)
    lying = bytearray(data)
    lying[8:12] = (10**6).to_bytes(4, "big")  # the first batch claims a megabyte
    assert not passes(bytes(lying))
