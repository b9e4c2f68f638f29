"""The tests' S3 server: the engine's own SeaweedFS launcher (`engine.cli._local_s3`, what
`demo --tier s3` and `kafka-broker` start) with the tests' credentials and bucket, plus what
tests need on top: the store settings a child process can be handed (`config()`) and a plain
obstore client to compare with (`raw_store()`).

The `s3_server` session fixture in conftest.py starts one for the whole run; a server that does
not answer within the start-up bound is a failure with the tail of its log, never a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import timedelta

from engine.cli._local_s3 import START_TIMEOUT_S, LocalS3Server, free_ports
from engine.errors import LocalS3ServerError as S3ServerError

__all__ = ["S3Server", "S3ServerError", "free_ports"]

ACCESS_KEY = "engine-test-access"
SECRET_KEY = "engine-test-secret-not-real"
DEFAULT_BUCKETS = ("engine-test",)


class S3Server(LocalS3Server):
    """One running `weed mini` for tests, in `data_dir` (a temporary directory of its own,
    removed by `stop()`, when None)."""

    def __init__(self, data_dir: str | os.PathLike | None = None,
                 buckets: tuple[str, ...] = DEFAULT_BUCKETS,
                 start_timeout_s: float = START_TIMEOUT_S):
        self._own_dir = data_dir is None
        # a test's server holds nothing worth a long clean stop
        super().__init__(tempfile.mkdtemp(prefix="weed-") if data_dir is None else data_dir,
                         buckets, access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                         start_timeout_s=start_timeout_s, stop_timeout_s=5.0)

    def config(self, bucket: str | None = None, endpoint: str | None = None) -> dict[str, str]:
        """The store settings under the plugin's config names (without `rsm.config.`)."""
        configs = self.rsm_configs(bucket, endpoint)
        del configs["storage.backend.class"]
        return configs

    def raw_store(self, bucket: str | None = None, endpoint: str | None = None):
        """A plain obstore S3Store on a bucket, for tests and benchmarks to compare with."""
        from obstore.store import S3Store

        return S3Store(
            bucket or self.bucket, endpoint=endpoint or self.endpoint,
            access_key_id=self.access_key, secret_access_key=self.secret_key,
            region=self.region, virtual_hosted_style_request=False,
            client_options={"allow_http": True, "timeout": "30s", "connect_timeout": "5s"},
            retry_config={"max_retries": 2, "retry_timeout": timedelta(seconds=30)})

    def stop(self) -> None:
        super().stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


if __name__ == "__main__":
    # `python tests/s3_server.py`: run a server in the foreground for manual checks
    with S3Server() as server:
        print(json.dumps(server.config()), flush=True)
        try:
            server.proc.wait()
        except KeyboardInterrupt:
            pass
