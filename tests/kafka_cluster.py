"""Real Apache Kafka for tests: KRaft clusters of 1 or 3 nodes on free 127.0.0.1 ports, and
the Java client program, both from the Maven build of tests/kafka (`scripts/setup.sh test`,
or `mvn -q -f tests/kafka/pom.xml package`), which puts every runtime jar of the broker and
its tools in tests/kafka/target/lib/ and the client in tests/kafka/target/.

Every node runs in combined mode (process.roles=broker,controller); three nodes make a
three-voter controller quorum (static `controller.quorum.voters`). Each node's storage is
formatted with Kafka's own storage tool under one cluster id, and its output (broker log
included) goes to `<base>/node-<id>/kafka.log`, whose tail is in every start-up failure.
Extra broker properties (`server_properties`) are merged over the defaults below, for every
node. Start-up is bounded: a node that has not logged "Kafka Server started" in time, or
that exits, is a `KafkaClusterError`, never a skip.

`run_client(args, timeout)` runs the client program once and returns its stdout JSON lines
as dicts; a nonzero exit is a `ClientError` carrying the lines printed before it, the exit
status and stderr. `ClientProcess(args)` runs it in the background (several members of one
group at once), `result(timeout)` collecting the same."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from s3_server import free_ports

from engine.cli.kafka_broker import LOG4J2_PROPERTIES

__all__ = ["CLIENT_JAR", "LIB_DIR", "ClientError", "ClientProcess", "KafkaCluster",
           "KafkaClusterError", "kafka_classpath", "run_client", "wait_until"]

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "tests" / "kafka" / "target"
LIB_DIR = TARGET / "lib"
# KAFKA_TEST_CLIENT_JAR: a client jar built elsewhere (from changed sources, before the
# Maven build here is redone)
CLIENT_JAR = Path(os.environ.get("KAFKA_TEST_CLIENT_JAR") or TARGET / "kafka-test-client.jar")
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
_START_ATTEMPTS = 3
STARTED = "Kafka Server started"  # KafkaRaftServer logs it once the broker is unfenced
BROKER_HEAP = "-Xmx384m"
# short-lived JVMs on a small machine: C1 only starts faster and costs less CPU
CLIENT_JVM = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")

# the broker's log: INFO to stdout (the node's log file), as `kafka-broker` writes it
_LOG4J2 = LOG4J2_PROPERTIES


class KafkaClusterError(RuntimeError):
    """A Kafka node could not be formatted, started or stopped (the log tail is in the
    message), or the Maven build of tests/kafka is missing."""


class ClientError(RuntimeError):
    """The client program exited nonzero (or its output was not JSON lines)."""

    def __init__(self, message: str, returncode: int, lines: list[dict], stderr: str):
        super().__init__(message)
        self.returncode = returncode
        self.lines = lines
        self.stderr = stderr


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaClusterError("no `java` on PATH and no JAVA_HOME (Kafka needs Java 17+)")
    return found


def kafka_classpath() -> str:
    """The broker's classpath (every jar of tests/kafka/target/lib/)."""
    if not any(LIB_DIR.glob("kafka_2.13-*.jar")):
        raise KafkaClusterError(
            f"no Kafka broker jars in {LIB_DIR}: run `scripts/setup.sh test` "
            "(or `mvn -q -f tests/kafka/pom.xml package`)")
    return str(LIB_DIR / "*")


def _parse_lines(stdout: str) -> list[dict]:
    lines = []
    for n, line in enumerate(stdout.splitlines(), 1):
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ClientError(f"client stdout line {n} is not JSON ({e}): {line[:200]!r}",
                              0, lines, "") from e
    return lines


class ClientProcess:
    """The client program running in the background (say a consumer that a second member
    of its group joins later); `lines_so_far()` reads what it printed up to now,
    `result(timeout)` waits for it as `run_client` does. Its output goes to files (appended
    to, so reading them while it runs is safe), so a long run never blocks on a full pipe."""

    def __init__(self, args: list[str]):
        if not CLIENT_JAR.is_file():
            raise KafkaClusterError(f"no client jar {CLIENT_JAR}: run `scripts/setup.sh test`")
        self.args = list(args)
        cmd = [java(), *CLIENT_JVM, "-cp", f"{CLIENT_JAR}{os.pathsep}{kafka_classpath()}",
               "enginetest.kafka.Main", *args]
        self._dir = Path(tempfile.mkdtemp(prefix="kafka-client-"))
        with open(self._dir / "out", "ab") as out, open(self._dir / "err", "ab") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def lines_so_far(self) -> list[dict]:
        """The complete JSON lines printed so far."""
        text = (self._dir / "out").read_text(errors="replace")
        return _parse_lines(text[:text.rfind("\n") + 1])

    def result(self, timeout: float) -> list[dict]:
        """Its JSON lines once it exits; ClientError if it exited nonzero. A timeout kills
        it (and raises subprocess.TimeoutExpired)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        out, err = ((self._dir / name).read_text(errors="replace") for name in ("out", "err"))
        shutil.rmtree(self._dir, ignore_errors=True)
        lines = _parse_lines(out)
        if self.proc.returncode != 0:
            raise ClientError(f"client {self.args[:1]} exited {self.proc.returncode}: "
                              f"{_tail(err, 15)}", self.proc.returncode, lines, err)
        return lines

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def run_client(args: list[str], timeout: float = 120.0) -> list[dict]:
    """Runs `java ... enginetest.kafka.Main *args` (e.g. ["produce", "--bootstrap", b,
    "--topic", "t", "--count", "10"]); returns its JSON lines. A timeout kills it (and
    raises subprocess.TimeoutExpired)."""
    return ClientProcess(args).result(timeout)


def _tail(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def new_cluster_id() -> str:
    """A Kafka Uuid as its tools print it: 16 random bytes, URL-safe base64 unpadded. Like
    Kafka's Uuid.randomUuid, never one starting with `-`, which the storage tool would take
    for an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


@dataclass
class KafkaNode:
    node_id: int
    port: int  # PLAINTEXT, what clients use
    controller_port: int
    dir: Path
    proc: subprocess.Popen | None = None
    _log_mark: int = 0  # log size when last launched: readiness is looked for after it

    @property
    def log_path(self) -> Path:
        return self.dir / "kafka.log"

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    def log_tail(self, n: int = 40) -> str:
        try:
            return _tail(self.log_path.read_text(errors="replace"), n)
        except OSError as e:
            return f"(no log: {e})"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class KafkaCluster:
    """`brokers` combined KRaft nodes (ids 1..n). `bootstrap` is every node's PLAINTEXT
    address. Use as a context manager or call `start()` and `stop()`."""

    def __init__(self, base_dir: str | os.PathLike, brokers: int = 1,
                 server_properties: dict | None = None, classpath_extra=(),
                 env: dict | None = None, start_timeout_s: float = START_TIMEOUT_S,
                 jvm_options=(BROKER_HEAP,)):
        if brokers not in (1, 3):
            raise ValueError(f"brokers must be 1 or 3, not {brokers}")
        self.base_dir = Path(base_dir)
        self.server_properties = {str(k): str(v) for k, v in (server_properties or {}).items()}
        self.classpath = os.pathsep.join([kafka_classpath(), *map(str, classpath_extra)])
        self.env = {**os.environ, **(env or {})}
        self.start_timeout_s = start_timeout_s
        self.jvm_options = list(jvm_options)
        self.cluster_id = new_cluster_id()
        ports = free_ports(2 * brokers)
        self.nodes = {i + 1: KafkaNode(i + 1, ports[2 * i], ports[2 * i + 1],
                                       self.base_dir / f"node-{i + 1}")
                      for i in range(brokers)}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values())

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id]

    # -- configuration -------------------------------------------------------------------
    def properties(self, node: KafkaNode) -> dict[str, str]:
        """The node's server.properties: a small test broker, then `server_properties`."""
        n = len(self.nodes)
        voters = ",".join(f"{m.node_id}@127.0.0.1:{m.controller_port}"
                          for m in self.nodes.values())
        props = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},"
                         f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": node.data_dir,
            # internal topics sized for the cluster (their defaults want 3 replicas and
            # 50 partitions, which a 1-node cluster cannot place and a test does not need)
            "offsets.topic.replication.factor": n,
            "offsets.topic.num.partitions": 5,
            "transaction.state.log.replication.factor": n,
            "transaction.state.log.min.isr": min(n, 2),
            "transaction.state.log.num.partitions": 5,
            "share.coordinator.state.topic.replication.factor": n,
            "share.coordinator.state.topic.min.isr": min(n, 2),
            "rlmm.config.remote.log.metadata.topic.replication.factor": n,
            "rlmm.config.remote.log.metadata.topic.num.partitions": 5,
            "group.initial.rebalance.delay.ms": 0,
            # two cores: fewer threads than the defaults
            "num.network.threads": 2,
            "num.io.threads": 4,
            "background.threads": 4,
            "num.recovery.threads.per.data.dir": 1,
        }
        props.update(self.server_properties)
        return {k: str(v) for k, v in props.items()}

    def _write_configs(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        (self.base_dir / "log4j2.properties").write_text(_LOG4J2)
        for node in self.nodes.values():
            node.dir.mkdir(parents=True, exist_ok=True)
            node.config_path.write_text("".join(
                f"{k}={v}\n" for k, v in self.properties(node).items()))

    def _java(self, *args: str) -> list[str]:
        return [java(), *self.jvm_options, "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.base_dir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.base_dir}", "-cp", self.classpath, *args]

    def _format(self) -> None:
        """Formats every node's storage with Kafka's storage tool, in parallel."""
        procs = {}
        for node in self.nodes.values():
            with open(node.log_path, "ab") as log:
                procs[node.node_id] = subprocess.Popen(
                    self._java("kafka.tools.StorageTool", "format", "--cluster-id",
                               self.cluster_id, "--config", str(node.config_path)),
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=self.env, start_new_session=True)
        failed = []
        for node_id, proc in procs.items():
            try:
                code = proc.wait(timeout=self.start_timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait()
            if code != 0:
                failed.append(node_id)
        if failed:
            raise KafkaClusterError("formatting the storage of node(s) "
                                    f"{failed} failed:\n{self.nodes[failed[0]].log_tail()}")

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> Self:
        """Formats and starts every node. A port taken between choosing and binding (by
        anything else on the machine) makes a node exit: start-up then begins afresh with
        new ports and a new cluster, a bounded number of times."""
        for attempt in range(_START_ATTEMPTS):
            try:
                self._write_configs()
                self._format()
                for node in self.nodes.values():
                    self._launch(node)
                self._wait_started(list(self.nodes.values()))
                return self
            except KafkaClusterError:
                self.stop()
                if attempt + 1 == _START_ATTEMPTS or not self._port_was_taken():
                    raise
                self._renew()
        raise AssertionError("unreachable")

    def _port_was_taken(self) -> bool:
        return any("Address already in use" in n.log_tail(200) for n in self.nodes.values())

    def _renew(self) -> None:
        """Fresh ports, cluster id and node dirs (the old logs kept beside them)."""
        self.cluster_id = new_cluster_id()
        ports = free_ports(2 * len(self.nodes))
        for i, node in enumerate(self.nodes.values()):
            node.port, node.controller_port = ports[2 * i], ports[2 * i + 1]
            if node.dir.exists():
                node.dir.rename(node.dir.with_name(f"{node.dir.name}-port-taken-{node.port}"))

    def _launch(self, node: KafkaNode) -> None:
        node._log_mark = node.log_path.stat().st_size if node.log_path.exists() else 0
        with open(node.log_path, "ab") as log:
            node.proc = subprocess.Popen(
                self._java("kafka.Kafka", str(node.config_path)),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, start_new_session=True)

    def _started(self, node: KafkaNode) -> bool:
        with open(node.log_path, "rb") as f:
            f.seek(node._log_mark)
            return STARTED.encode() in f.read()

    def _wait_started(self, nodes: list[KafkaNode]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        waiting = list(nodes)
        while waiting:
            for node in list(waiting):
                if node.proc is None or node.proc.poll() is not None:
                    code = None if node.proc is None else node.proc.returncode
                    raise KafkaClusterError(f"Kafka node {node.node_id} exited ({code}) "
                                            f"while starting:\n{node.log_tail()}")
                if self._started(node):
                    waiting.remove(node)
            if waiting and time.monotonic() > deadline:
                node = waiting[0]
                raise KafkaClusterError(
                    f"Kafka node {node.node_id} not started within "
                    f"{self.start_timeout_s:.0f} s:\n{node.log_tail()}")
            if waiting:
                time.sleep(0.2)

    def stop_node(self, node_id: int, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL if it outlasts `timeout`. Returns the
        exit status (None if it was not running)."""
        node = self.nodes[node_id]
        if node.running():
            node.proc.send_signal(signal.SIGTERM)
        return self._reap(node, timeout)

    @staticmethod
    def _reap(node: KafkaNode, timeout: float) -> int | None:
        proc, node.proc = node.proc, None
        if proc is None:
            return None
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        return proc.returncode

    def kill(self, node_id: int) -> None:
        """kill -9 of the node: no shutdown, its files as the crash left them."""
        node = self.nodes[node_id]
        proc, node.proc = node.proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def start_node(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.running():
            raise KafkaClusterError(f"Kafka node {node_id} is already running")
        self._launch(node)
        self._wait_started([node])

    def restart(self, node_id: int) -> None:
        """A clean stop (if it runs) and a start of the same node, same ports and dirs."""
        self.stop_node(node_id)
        self.start_node(node_id)

    def stop(self) -> None:
        """Stops every node: SIGTERM to all at once (a controller quorum shuts down faster
        together), each waited for at most STOP_TIMEOUT_S, then killed."""
        running = [n for n in self.nodes.values() if n.running()]
        for node in running:
            node.proc.send_signal(signal.SIGTERM)
        for node in running:
            self._reap(node, STOP_TIMEOUT_S)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients -------------------------------------------------------------------------
    def run_client(self, args: list[str], timeout: float = 120.0) -> list[dict]:
        """`run_client` with `--bootstrap` of this cluster after the subcommand."""
        return self.start_client(args).result(timeout)

    def start_client(self, args: list[str]) -> ClientProcess:
        """A `ClientProcess` with `--bootstrap` of this cluster after the subcommand."""
        return ClientProcess([args[0], "--bootstrap", self.bootstrap, *args[1:]])

    def describe(self, topic: str, partition: int = 0) -> dict:
        """The partition as Admin.describeTopics sees it: leader (-1 if none), replicas,
        isr."""
        [desc] = self.run_client(["describe-topic", "--topic", topic], timeout=60)
        return next(p for p in desc["partitions"] if p["partition"] == partition)

    def leader(self, topic: str, partition: int = 0) -> int:
        return self.describe(topic, partition)["leader"]


def wait_until(what: str, check, timeout: float = 120, interval: float = 0.5):
    """`check()`'s first truthy answer; AssertionError naming `what` (and the last answer)
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
