"""The `kafka-tiered` Spark source over the object-store tier: a real local Spark session
whose tasks read a real S3 server (SeaweedFS) directly, through the RSM the properties name,
with no directory shared with the broker. Rows equal what `python -m engine fetch` returns."""

import os
import uuid

import pytest
from spark_support import TieredCluster, arrow_rows, fetch_row

TOPIC = "events"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server):
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": f"spark-{uuid.uuid4().hex[:8]}/",
             "rsm.config.chunk.size": "16384", "rsm.config.compression.enabled": "true"}
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    c = TieredCluster(tmp_path_factory.mktemp("spark-s3"), props)
    c.produce_and_tier(TOPIC, 2, 1500)
    return c


def test_spark_reads_the_object_store_tier(cluster, spark):
    fetched = {p: cluster.fetch(TOPIC, p, 0) for p in (0, 1)}
    df = (spark.read.format("kafka-tiered").option("config", str(cluster.config))
          .option("subscribe", TOPIC).option("includeHeaders", "true").load())
    got = arrow_rows(df.toArrow())
    want = sorted((fetch_row(TOPIC, p, r) for p in (0, 1) for r in fetched[p]),
                  key=lambda r: (r[3], r[4]))
    assert len(got) == len(want) == 3000
    assert got == want
    assert not any(cluster.tier_dir.iterdir())  # nothing went through a shared directory


def test_export_over_the_object_store_tier(tmp_path, s3_server):
    """`python -m engine export` (a real subprocess, local Spark) over the object-store tier
    with read-ahead on, so the tasks hand the RSM their next segments: the Parquet output
    holds every tiered record once, equal to what `fetch` returns, and the state file says
    the whole tier is exported."""
    import subprocess
    import sys

    import pyarrow.dataset as pads
    from spark_support import REPO, require_java, spark_env

    from engine.scan.export import ExportState
    from engine.scan.planning import tier_bounds
    from engine.scan.tier import Tier
    from engine.spark.export import STATE_FILE

    require_java()
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": f"export-{uuid.uuid4().hex[:8]}/",
             "rsm.config.chunk.size": "8192",
             "rsm.config.fetch.chunk.cache.class":
                 "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache",
             "rsm.config.fetch.chunk.cache.size": str(64 << 20),
             "rsm.config.fetch.chunk.cache.prefetch.max.size": "32768"}
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    c = TieredCluster(tmp_path / "cluster", props)
    c.produce_and_tier(TOPIC, 2, 900, segment_bytes=24 << 10)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "engine", "export", "--master", "local[2]",
                           "--config", str(c.config), "--topic", TOPIC, "--out", str(out)],
                          cwd=REPO, env={**os.environ, **spark_env()}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert s3_server.secret_key not in proc.stdout + proc.stderr

    with Tier(c.props) as tier:
        chains = {p: tier.chain(tip) for (t, p), tip in tier.partitions().items()
                  if t == TOPIC}
        ends = {p: tier_bounds(chain)[1] for p, chain in chains.items()}
    assert all(len(chain) >= 3 for chain in chains.values())  # tasks cross segments
    assert ExportState.load(out / STATE_FILE, TOPIC).offsets == ends
    files = sorted(map(str, out.glob("partition=*/date=*/*.parquet")))
    table = pads.dataset(files, format="parquet", partitioning="hive",
                         partition_base_dir=str(out)).to_table()
    want = sorted((fetch_row(TOPIC, p, r, headers=False) for p in (0, 1)
                   for r in c.fetch(TOPIC, p, 0) if r["offset"] < ends[p]),
                  key=lambda r: (r[3], r[4]))
    assert arrow_rows(table.drop_columns(["date"])) == want
    assert not any(c.tier_dir.iterdir())  # nothing went through a shared directory
