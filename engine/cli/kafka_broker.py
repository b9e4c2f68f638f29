"""`kafka-broker`: a local Apache Kafka broker (KRaft, one node) whose RemoteStorageManager is
the engine, tiering into a local SeaweedFS, for a user to try the broker plugin.

The command writes the broker properties an operator would write (README, "Use it in an
Apache Kafka broker": Kafka's `remote.log.*` keys, the plugin's class name and class path,
the Aiven plugin's `rsm.config.*` names for the store, Kafka's topic-based RLMM), formats the
node's storage with Kafka's own tool, prints the bootstrap address and the properties file,
and runs the broker in the foreground until it exits or Ctrl-C stops it (the broker is asked
to shut down cleanly, then the S3 server stops).

Kafka's jars come from `--kafka-libs` (a directory of jars: a Kafka distribution's `libs/`,
or the one `scripts/setup.sh test` resolves from Maven Central into tests/kafka/target/lib).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

__all__ = ["LOG4J2_PROPERTIES", "add_parser", "broker_properties", "run"]

PLUGIN_CLASS = "tierengine.kafka.EngineRemoteStorageManager"
_PROJECT = Path(__file__).resolve().parents[2]
_DEFAULT_LIBS = _PROJECT / "tests" / "kafka" / "target" / "lib"
#: the broker's log4j2 configuration: INFO to stdout, the chattiest loggers at WARN
LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


def plugin_jar() -> Path:
    """Where scripts/setup.sh installs the plugin: inside the venv, which it then finds."""
    return Path(sys.prefix) / "share" / "kafka-tier-engine" / "kafka-tier-engine-plugin.jar"


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("kafka-broker",
                       help="a local Apache Kafka broker tiering through the engine into a "
                            "local SeaweedFS")
    p.add_argument("--kafka-libs", default=str(_DEFAULT_LIBS), metavar="DIR",
                   help="a directory of Kafka's jars (default: the one `scripts/setup.sh "
                        "test` resolves, tests/kafka/target/lib)")
    p.add_argument("--dir", default=None,
                   help="where the broker's and the S3 server's data go (default: a temp "
                        "dir, removed at exit)")
    p.add_argument("--port", type=int, default=9092,
                   help="the broker's PLAINTEXT port on 127.0.0.1 (default 9092)")
    return p


def broker_properties(node_dir: Path, port: int, controller_port: int,
                      store: dict[str, str]) -> dict[str, str]:
    """One KRaft node tiering through the plugin into `store` (`rsm.config.` names)."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node_dir / "data"),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # tiered storage: Kafka's keys, the engine as the RSM, Kafka's topic-based RLMM
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": PLUGIN_CLASS,
        "remote.log.storage.manager.class.path": str(plugin_jar()),
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "remote.log.manager.task.interval.ms": "5000",
        # the store, in the Aiven plugin's names; a memory chunk cache with read-ahead
        "rsm.config.chunk.size": str(4 << 20),
        "rsm.config.fetch.chunk.cache.class":
            "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache",
        "rsm.config.fetch.chunk.cache.size": str(256 << 20),
        "rsm.config.fetch.chunk.cache.prefetch.max.size": str(16 << 20),
    }
    props.update({f"rsm.config.{k}": v for k, v in store.items()})
    return props


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free port on 127.0.0.1")


def run(args) -> int:
    from engine.cli._local_s3 import LocalS3Server
    from engine.errors import LocalS3ServerError

    libs = Path(args.kafka_libs)
    if not libs.is_dir() or not any(libs.glob("kafka_2.13-*.jar")):
        print(f"error: --kafka-libs {libs}: no Kafka broker jars (kafka_2.13-*.jar) there; "
              "`bash scripts/setup.sh test` resolves them into tests/kafka/target/lib",
              file=sys.stderr)
        return 2
    if not plugin_jar().is_file():
        print(f"error: the broker plugin {plugin_jar()} is missing: run scripts/setup.sh",
              file=sys.stderr)
        return 2
    java = shutil.which("java")
    if java is None:
        print("error: no `java` on PATH (Kafka 4 needs Java 17+)", file=sys.stderr)
        return 2
    temp = None
    if args.dir is None:
        temp = tempfile.mkdtemp(prefix="kafka-broker-")
    base = Path(args.dir or temp)
    base.mkdir(parents=True, exist_ok=True)
    try:
        with LocalS3Server(base / "s3") as s3:
            return _run_broker(java, libs, base, args.port, s3.rsm_configs(), s3.endpoint,
                               s3.bucket)
    except LocalS3ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


def _run_broker(java: str, libs: Path, base: Path, port: int, store: dict, endpoint: str,
                bucket: str) -> int:
    node = base / "kafka"
    node.mkdir(parents=True, exist_ok=True)
    port = _free_port(port)
    props = broker_properties(node, port, _free_port(0), store)
    config = node / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (node / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
    command = [java, "-Xmx1g", f"-Dlog4j2.configurationFile={node / 'log4j2.properties'}",
               f"-Dkafka.logs.dir={node}", "-cp", f"{libs}{os.sep}*"]
    if not (node / "data" / "meta.properties").exists():
        fmt = subprocess.run([*command, "kafka.tools.StorageTool", "format", "--cluster-id",
                              _cluster_id(), "--config", str(config)],
                             capture_output=True, text=True, timeout=120)
        if fmt.returncode != 0:
            print(f"error: formatting the broker's storage failed:\n{fmt.stdout}{fmt.stderr}",
                  file=sys.stderr)
            return 1
    print(f"bootstrap: 127.0.0.1:{port}", flush=True)
    print(f"broker properties: {config}", flush=True)
    print(f"bucket: s3://{bucket} at {endpoint}", flush=True)
    print("a topic tiers with: --config remote.storage.enable=true (Ctrl-C stops the broker)",
          flush=True)
    broker = subprocess.Popen([*command, "kafka.Kafka", str(config)],
                              stdin=subprocess.DEVNULL, start_new_session=True)
    stopping = []

    def stop(*_):
        stopping.append(True)
        broker.send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        code = broker.wait()
    except KeyboardInterrupt:
        stop()
        try:
            code = broker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            broker.kill()
            code = broker.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    # a broker asked to stop exits through its shutdown hook (143 on SIGTERM): a clean stop
    return 0 if stopping and code in (0, 143, -signal.SIGTERM) else code


def _cluster_id() -> str:
    """A random cluster id in Kafka's form (a Uuid in base64url, 22 characters)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
