"""Buckets written by the engine's object-store tier with each transform combination
(plain, zstd, AES-256-GCM encryption, both) read back from the bucket alone, records equal
to `python -m engine fetch --json`, and scrub clean."""

import json
import uuid

import pytest
from spark_support import TieredCluster, arrow_rows, fetch_row
from test_cli_scrub import scrub
from test_objectstore_transforms import write_key_pair

from engine.arrow import read_topic

TOPIC = "combo"


@pytest.fixture(scope="module")
def key_files(tmp_path_factory):
    public, private, _ = write_key_pair(tmp_path_factory.mktemp("keys"), "k1")
    return {"rsm.config.encryption.key.pairs.k1.public.key.file": public,
            "rsm.config.encryption.key.pairs.k1.private.key.file": private}


@pytest.mark.parametrize("compression,encryption", [(False, False), (True, False),
                                                    (False, True), (True, True)],
                         ids=["plain", "zstd", "encrypted", "zstd+encrypted"])
def test_each_transform_combination_reads_back_from_the_bucket(
        tmp_path, s3_server, key_files, compression, encryption):
    prefix = f"combo-{uuid.uuid4().hex[:8]}/"
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": prefix, "rsm.config.chunk.size": "4096",
             "rsm.config.compression.enabled": str(compression).lower()}
    if encryption:
        props.update({"rsm.config.encryption.enabled": "true",
                      "rsm.config.encryption.key.pair.id": "k1",
                      "rsm.config.encryption.key.pairs": "k1", **key_files})
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    cluster = TieredCluster(tmp_path, props)
    cluster.produce_and_tier(TOPIC, 1, 500, codec="none", segment_bytes=16 << 10)
    url = f"s3://{s3_server.buckets[0]}/{prefix}"
    want = [fetch_row(TOPIC, 0, r) for r in cluster.fetch(TOPIC, 0, 0)]
    # the store and the key pairs from the broker file's rsm.config.*; no RLMM
    with read_topic(TOPIC, bucket=url, config=cluster.config, include_headers=True) as stream:
        assert len(stream.ranges) > 3
        got = arrow_rows(stream.read_all())
    assert got == want and len(got) == 500
    rc, out, err = scrub("--bucket", url, "--config", str(cluster.config), "--json")
    assert rc == 0, (out, err)
    assert json.loads(out)["segments"] > 3
