"""What the `serve` tests share: a broker dir with a topic produced by the engine (every
codec, headers, transactions some of them aborted) and tiered by `run --until-idle` with a
small local retention, the consumer view of each partition from `engine fetch --json` (run in
this process), and `serve` as a real subprocess on 127.0.0.1 with the port it bound."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from broker_support import SERVE, engine_in_process, write_broker

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "orders"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # one partition each
RECORDS_PER_PARTITION = 1500

def engine(*args) -> subprocess.CompletedProcess:
    """A reference view or set-up step: the command run in this process (engine_in_process);
    fails on a non-zero status."""
    return engine_in_process(*args)


@dataclass
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list = field(default_factory=list)


def _b64(text):
    return None if text is None else base64.b64decode(text)


def records_of(fetch_json: str) -> list[Record]:
    """`engine fetch --json` output -> Records."""
    return [Record(r["offset"], r["timestamp"], _b64(r["key"]), _b64(r["value"]),
                   [(k, _b64(v)) for k, v in r["headers"]])
            for r in map(json.loads, fetch_json.splitlines())]


@dataclass
class TieredBroker:
    config: str
    dirs: dict
    #: (isolation level, partition) -> records as `engine fetch --json` shows them
    views: dict
    #: partition -> {"earliest-local": n, "latest-tiered": n, "latest": n}
    offsets: dict

    def view(self, partition: int, read_committed: bool) -> list[Record]:
        return self.views[("read_committed" if read_committed else "read_uncommitted",
                           partition)]


def build_tiered_broker(base: Path, extra: str = "") -> TieredBroker:
    """Produces and tiers the topic, then reads every reference (before any `serve`
    holds the log dirs)."""
    from engine.cli.produce_demo import produce_partition
    from engine.common import Uuid
    from engine.config import load_broker_config
    from engine.log.log_manager import LogManager
    from engine.records import CompressionType

    config, dirs = write_broker(base, SERVE, extra=extra)
    broker = load_broker_config(config)
    topic_id = Uuid.random()
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        for p, codec in enumerate(CODECS):
            manager.get_or_create_log(TOPIC, p, topic_id=topic_id)
            produce_partition(manager, TOPIC, p, RECORDS_PER_PARTITION,
                              CompressionType[codec.upper()], seed=11)
    engine("run", "--config", str(config), "--until-idle")
    views = {}
    for p in range(len(CODECS)):
        for iso in ("read_uncommitted", "read_committed"):
            out = engine("fetch", "--config", str(config), "--topic", TOPIC, "--partition",
                         str(p), "--offset", "0", "--to-end", "--json",
                         "--isolation-level", iso).stdout
            views[(iso, p)] = records_of(out)
    offsets = {}
    for p in range(len(CODECS)):
        offsets[p] = {}
        for spec in ("earliest-local", "latest-tiered", "latest"):
            out = engine("list-offsets", "--config", str(config), "--topic", TOPIC,
                         "--partition", str(p), "--time", spec).stdout
            offsets[p][spec] = int(out.strip().rsplit(":", 1)[1])
        # the history really is split: the early offsets are only in the tier
        assert offsets[p]["earliest-local"] > 0, offsets
    return TieredBroker(config, dirs, views, offsets)


class ServeProcess:
    """`python -m engine serve` as a subprocess; `port` once it listens. stderr is drained
    by a thread (kept in `lines`) so the child never blocks on a full pipe."""

    def __init__(self, config: str, start_timeout: float = 60.0, listeners: int = 1) -> None:
        self.proc = subprocess.Popen(self.command(config), cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: list[str] = []
        self.port: int | None = None  # of the first listener
        self.ports: dict[str, int] = {}  # listener name -> bound port
        self._expected = listeners
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        if not self._listening.wait(start_timeout) or self.port is None:
            self.kill()
            raise AssertionError("serve did not listen:\n" + "".join(self.lines))

    @staticmethod
    def command(config: str) -> list[str]:
        return [sys.executable, "-m", "engine", "serve", "--config", config]

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            if "listening on" in line:
                uri = line.split("listening on ", 1)[1].split()[0]
                self.ports[uri.split("://", 1)[0]] = int(uri.rsplit(":", 1)[1])
                if self.port is None:
                    self.port = self.ports[uri.split("://", 1)[0]]
                if len(self.ports) >= self._expected:
                    self._listening.set()
        self._listening.set()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)
        self._reader.join(60)

    def output(self) -> str:
        return "".join(self.lines)


def build_small_broker(base: Path, extra: str = "", records: int = 3000) -> str:
    """One partition of `TOPIC` (zstd, 64 KiB segments), not tiered: for tests of the
    server's connection handling. Returns the broker file."""
    from engine.cli.produce_demo import produce_partition
    from engine.config import load_broker_config
    from engine.log.log_manager import LogManager
    from engine.records import CompressionType

    config, _ = write_broker(base, SERVE, extra=extra)
    broker = load_broker_config(config)
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        manager.get_or_create_log(TOPIC, 0)
        produce_partition(manager, TOPIC, 0, records, CompressionType.ZSTD, seed=5)
    return config


def process_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def process_sockets(pid: int) -> int:
    """Open sockets of the process (its listeners and connections)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except FileNotFoundError:
            continue  # closed while listed
    return count


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d: Path) -> Path:
    """A CA (`ca.pem`) and a server key and certificate for localhost / 127.0.0.1
    (`keystore.pem`, `server.key`, `server.pem`), made with openssl in `d`."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=serve-test-ca", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
             "server.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext",
             cwd=d)
    (d / "keystore.pem").write_text((d / "server.key").read_text()
                                    + (d / "server.pem").read_text())
    return d
