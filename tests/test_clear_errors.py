"""Clear errors from the object-store tier's configuration and client: a chunk cache directory
that cannot be used, secrets typed in the wrong place, missing S3 credentials and a store
that fails or hangs are each one error naming what is wrong, through `configure` and
through real `python -m engine ...` processes (one `error:` line, no traceback, no panic)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.config import ConfigError
from engine.log.log_manager import LogManager
from engine.records import RecordBatchBuilder
from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE_KEY = "fetch.chunk.cache.path"


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_error_line(proc: subprocess.CompletedProcess, status: int, *needles: str
                          ) -> str:
    """Exit `status`, exactly one stderr line `error: ...` naming each of `needles`, and no
    traceback or Rust panic; returns the line."""
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for bad in ("Traceback", "panicked", "thread '"):
        assert bad not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _rsm_configs(s3_server, **extra: str) -> dict[str, str]:
    return {"storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
            "chunk.size": "4096", **s3_server.config(), **extra}


def _broker_file(tmp_path, s3_server, extra: dict[str, str]) -> str:
    """A broker file tiering to `s3_server` through the object-store tier, with topic
    `orders` (one partition, a few records); `extra` are rsm.config keys."""
    log_dir = tmp_path / "logs"
    with LogManager([log_dir]) as manager:
        manager.get_or_create_log("orders", 0)
        builder = RecordBatchBuilder()
        builder.append(b"v", timestamp=1_600_000_000_000)
        manager.append_as_leader("orders", 0, builder.build(), 0)
    configs = _rsm_configs(s3_server, **extra)
    lines = [f"log.dirs={log_dir}", "remote.log.storage.system.enable=true",
             "remote.log.storage.manager.class.name="
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             *(f"rsm.config.{k}={v}" for k, v in configs.items())]
    path = tmp_path / "server.properties"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# -- a chunk cache directory that cannot be created or used ------------------------------


def _unusable_cache_paths(tmp_path) -> dict[str, str]:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    tmp_in_the_way = tmp_path / "cache-with-a-file-as-tmp"
    tmp_in_the_way.mkdir()
    (tmp_in_the_way / "tmp").write_text("in the way")
    return {"a file in the way": str(a_file), "a path under a file": str(a_file / "cache"),
            "its tmp a file": str(tmp_in_the_way)}


@pytest.mark.parametrize("case", ["a file in the way", "a path under a file",
                                  "its tmp a file"])
def test_unusable_chunk_cache_dir_is_a_config_error_from_configure(tmp_path, s3_server,
                                                                    case):
    path = _unusable_cache_paths(tmp_path)[case]
    rsm = ObjectStorageRemoteStorageManager()
    with pytest.raises(ConfigError) as info:
        rsm.configure(_rsm_configs(s3_server, **{
            "fetch.chunk.cache.class": "disk", "fetch.chunk.cache.size": "-1",
            CACHE_KEY: path}))
    assert info.value.key == CACHE_KEY and path in str(info.value)
    rsm.close()  # a manager whose configure failed closes without an error


@pytest.mark.parametrize("case", ["a file in the way", "a path under a file"])
def test_unusable_chunk_cache_dir_is_one_line_from_the_cli(tmp_path, s3_server, case):
    path = _unusable_cache_paths(tmp_path)[case]
    broker = _broker_file(tmp_path, s3_server, {
        "fetch.chunk.cache.class": "disk", "fetch.chunk.cache.size": "-1", CACHE_KEY: path})
    proc = cli("fetch", "--config", broker, "--topic", "orders", "--partition", "0",
               "--offset", "0")
    assert_one_error_line(proc, 2, f"rsm.config.{CACHE_KEY}", path)


# -- secrets typed in the wrong place are never echoed -----------------------------------

SECRET = "S3cr3tValue-0123456789"

#: (rsm.config key, value): misspelt secret keys, and credentials in a URL's userinfo
MISPLACED_SECRETS = [
    ("storage.aws.secret.access.keyXYZ", SECRET),
    ("storage.aws.access.key.idd", SECRET),
    ("storage.aws.scret.access.key", SECRET),  # the secret word itself misspelt
    ("storage.azure.account.keyy", SECRET),
    ("storage.azure.acount.key", SECRET),  # only the key it resembles names a secret
    ("storage.gcs.credentials.jsonn", SECRET),
    ("storage.s3.endpoint.url", f"http://user:{SECRET}@127.0.0.1:9000"),
]


def _assert_no_secret(text: str) -> None:
    assert SECRET not in text and SECRET[:8] not in text, text


@pytest.mark.parametrize("key, value", MISPLACED_SECRETS)
def test_configure_never_echoes_a_misplaced_secret(s3_server, key, value):
    rsm = ObjectStorageRemoteStorageManager()
    with pytest.raises(ConfigError) as info:
        rsm.configure(_rsm_configs(s3_server, **{key: value}))
    assert info.value.key == key
    _assert_no_secret(str(info.value))
    _assert_no_secret(repr(info.value.value))


@pytest.mark.parametrize("key, value", MISPLACED_SECRETS)
def test_serve_store_option_never_echoes_a_misplaced_secret(tmp_path, s3_server, key,
                                                             value):
    store = [f"{k}={v}" for k, v in _rsm_configs(s3_server, **{key: value}).items()]
    proc = cli("serve", "--bucket", f"s3://{s3_server.buckets[0]}/x", "--state-dir",
               str(tmp_path), *(arg for item in store for arg in ("--store", item)))
    _assert_no_secret(proc.stderr + proc.stdout)
    assert_one_error_line(proc, 2, key)


def test_store_option_without_equals_is_not_echoed(tmp_path):
    proc = cli("serve", "--bucket", "s3://b/x", "--state-dir", str(tmp_path), "--store",
               f"storage.aws.secret.access.key {SECRET}")
    _assert_no_secret(proc.stderr)
    assert_one_error_line(proc, 2, "--store", "KEY=VALUE")


def test_credentials_in_the_bucket_url_are_never_echoed(tmp_path, s3_server):
    store = [f"{k}={v}" for k, v in s3_server.config().items()]
    proc = cli("serve", "--bucket", f"s3://user:{SECRET}@{s3_server.buckets[0]}/x",
               "--state-dir", str(tmp_path),
               *(arg for item in store for arg in ("--store", item)))
    _assert_no_secret(proc.stderr + proc.stdout)
    assert_one_error_line(proc, 2, "credentials")


@pytest.mark.parametrize("command", ["fetch", "run"])
@pytest.mark.parametrize("key, value", [MISPLACED_SECRETS[0], MISPLACED_SECRETS[-1]])
def test_broker_file_commands_never_echo_a_misplaced_secret(tmp_path, s3_server, command,
                                                            key, value):
    broker = _broker_file(tmp_path, s3_server, {key: value})
    args = ["--until-idle"] if command == "run" else ["--topic", "orders", "--partition",
                                                      "0", "--offset", "0"]
    proc = cli(command, "--config", broker, *args)
    _assert_no_secret(proc.stderr + proc.stdout)
    assert_one_error_line(proc, 2, f"rsm.config.{key}")


def test_store_error_texts_never_show_a_urls_credentials():
    """Store errors carry obstore's message with the request's URL: its userinfo is masked
    whatever put it there."""
    from engine.errors import redact_userinfo

    text = f"Error performing GET http://user:{SECRET}@127.0.0.1:1/b?list-type=2"
    assert redact_userinfo(text) == "Error performing GET http://***@127.0.0.1:1/b?list-type=2"


# -- an S3 endpoint without credentials fails at once, naming the keys -------------------

KEY_NAMES = ("storage.aws.access.key.id", "storage.aws.secret.access.key")


@pytest.fixture
def listener():
    """A listening loopback socket that nothing should connect to: the test checks its
    accept queue is empty afterwards (no request was attempted)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def _assert_never_connected(sock) -> None:
    with pytest.raises(BlockingIOError):
        sock.accept()


def _no_credentials(endpoint: str) -> dict[str, str]:
    return {"storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
            "storage.s3.bucket.name": "engine-test", "storage.s3.region": "us-east-1",
            "storage.s3.endpoint.url": endpoint,
            "storage.s3.path.style.access.enabled": "true"}


def test_configure_without_credentials_names_the_keys_and_connects_nowhere(listener):
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    rsm = ObjectStorageRemoteStorageManager()
    with pytest.raises(ConfigError) as info:
        rsm.configure(_no_credentials(endpoint))
    for key in KEY_NAMES:
        assert key in str(info.value)
    _assert_never_connected(listener)
    rsm.close()


def test_serve_without_credentials_is_one_line_naming_the_keys(tmp_path, listener):
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    store = [f"{k}={v}" for k, v in _no_credentials(endpoint).items()]
    proc = cli("serve", "--bucket", "s3://engine-test/x", "--state-dir", str(tmp_path),
               *(arg for item in store for arg in ("--store", item)))
    assert_one_error_line(proc, 2, *KEY_NAMES)
    _assert_never_connected(listener)


# -- a store that fails or hangs: the engine's own error line, no panic at exit ----------

#: anything obstore or asyncio would print when a call's answer comes after its store closed
#: (a traceback, "Event loop is closed") or after the interpreter finalized (a Rust panic)
_EXIT_NOISE = ("Traceback", "panicked", "thread '", "Event loop is closed", "RuntimeError",
               "Fatal Python error")


def _assert_quiet_exit(proc: subprocess.CompletedProcess, status: int, *needles: str) -> None:
    assert_one_error_line(proc, status, *needles)
    for bad in _EXIT_NOISE:
        assert bad not in proc.stderr, proc.stderr


def _tiered_broker(tmp_path, s3_server, endpoint: str) -> str:
    """A broker file whose topic `orders` has its first segments on the object-store tier
    only (tiered by `run --until-idle` through `s3_server`); its store then points at
    `endpoint`, with one attempt of 2 s per call, and reads wait 500 ms (Kafka's default
    `remote.fetch.max.wait.ms`)."""
    log_dir = tmp_path / "logs"
    with LogManager([log_dir], topic_defaults={"segment.bytes": "4096"}) as manager:
        manager.get_or_create_log("orders", 0)
        for i in range(60):
            builder = RecordBatchBuilder()
            builder.append(b"v%d" % i * 40, timestamp=1_600_000_000_000 + i)
            manager.append_as_leader("orders", 0, builder.build(), 0)
    base = {"log.dirs": str(log_dir), "remote.log.storage.system.enable": "true",
            "remote.storage.enable": "true", "log.local.retention.bytes": "4096",
            "log.retention.ms": "-1", "remote.log.storage.manager.class.name":
            "io.aiven.kafka.tieredstorage.RemoteStorageManager",
            **{f"rsm.config.{k}": v for k, v in _rsm_configs(s3_server).items()}}
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in base.items()))
    proc = cli("run", "--config", str(path), "--until-idle")
    assert proc.returncode == 0 and "copied" in proc.stderr, proc.stderr
    base.update({"rsm.config.storage.s3.endpoint.url": endpoint,
                 "rsm.config.storage.api.call.max.retries": "0",
                 "rsm.config.storage.s3.api.call.attempt.timeout": "2000",
                 "rsm.config.storage.s3.api.call.timeout": "2000",
                 "remote.fetch.max.wait.ms": "500"})
    path.write_text("".join(f"{k}={v}\n" for k, v in base.items()))
    return str(path)


def _fetch_offset_0(broker: str) -> subprocess.CompletedProcess:
    return cli("fetch", "--config", broker, "--topic", "orders", "--partition", "0",
               "--offset", "0")


@pytest.mark.parametrize("fault", ["closed", "hangs", "drops"])
def test_fetch_from_a_failing_store_is_one_error_line(tmp_path, s3_server, fault_proxy,
                                                      fault):
    from fault_proxy import Fault
    from s3_server import free_ports

    endpoint = (f"http://127.0.0.1:{free_ports(1)[0]}" if fault == "closed"
                else fault_proxy.endpoint)
    broker = _tiered_broker(tmp_path, s3_server, endpoint)
    if fault == "hangs":
        fault_proxy.add(Fault("delay", method="GET", times=None, delay_s=30))
    elif fault == "drops":
        fault_proxy.add(Fault("drop", method="GET", times=None))
    _assert_quiet_exit(_fetch_offset_0(broker), 1)


#: GET delays past the 500 ms read wait: the read times out, `fetch` closes the store and
#: exits while the GET is still in flight, its answer due during the close, during the
#: interpreter's exit or after it (whichever, on a given machine and load)
_PAST_THE_WAIT_S = (0.52, 0.56, 0.6, 0.7, 0.85, 1.1)


@pytest.mark.parametrize("delay_s", _PAST_THE_WAIT_S)
def test_fetch_past_the_read_wait_exits_quietly(tmp_path, s3_server, fault_proxy, delay_s):
    """A read that outlives `remote.fetch.max.wait.ms`: `fetch` says so in one line and
    exits 1; the GET answered after the store closed prints nothing (no "Event loop is
    closed" traceback) and the one answered after Python finalized no Rust panic."""
    from fault_proxy import Fault

    broker = _tiered_broker(tmp_path, s3_server, fault_proxy.endpoint)
    fault_proxy.add(Fault("delay", method="GET", times=None, delay_s=delay_s))
    for _ in range(3):
        _assert_quiet_exit(_fetch_offset_0(broker), 1, "RemoteFetchTimeoutError",
                           "remote.fetch.max.wait.ms")


@pytest.mark.parametrize("delay_s", (1.02, 1.1, 1.3, 1.6))
def test_serve_bucket_past_the_call_timeout_exits_quietly(tmp_path, s3_server, fault_proxy,
                                                          delay_s):
    """`serve --bucket` whose first listing outlives `storage.s3.api.call.timeout`: one
    error line naming the bucket and exit 1 (a store that does not answer is a failing
    tier, as for every command), and the LIST answered after the store closed prints
    nothing."""
    from fault_proxy import Fault

    settings = {**s3_server.config(), "storage.s3.endpoint.url": fault_proxy.endpoint,
                "storage.api.call.max.retries": "0",
                "storage.s3.api.call.attempt.timeout": "1000",
                "storage.s3.api.call.timeout": "1000"}
    settings.pop("storage.s3.bucket.name")
    store = [a for k, v in settings.items() for a in ("--store", f"{k}={v}")]
    fault_proxy.add(Fault("delay", method="GET", times=None, delay_s=delay_s))
    for i in range(2):
        proc = cli("serve", "--bucket", f"s3://{s3_server.buckets[0]}/slow-{i}/", *store,
                   "--state-dir", str(tmp_path / f"state-{i}"))
        _assert_quiet_exit(proc, 1, "RemoteStorageError", "did not finish",
                           f"s3://{s3_server.buckets[0]}/slow-{i}/")


def test_closing_the_store_ends_its_calls_in_flight(s3_server, fault_proxy):
    """The store closed (by the RLM's or the broker plugin's close of the tier) while its
    GETs and a LIST hang: every caller, on the store's loop or on its own thread's, ends
    with a RemoteStorageError naming the object, and obstore has released every call by
    the time close returns (nothing left to answer into a closed loop or a finalized
    interpreter). The calls' own bounds (120 s) are far past the waits here."""
    import threading
    import time

    from fault_proxy import Fault

    from engine.errors import RemoteStorageError
    from engine.remote.objectstore.store import ObjectStore, StoreConfig

    key = f"close-tests/{time.monotonic_ns()}.log"
    with ObjectStore(StoreConfig.from_configs(s3_server.config())) as direct:
        direct.upload(key, b"x" * 100)
    store = ObjectStore(StoreConfig.from_configs({
        **s3_server.config(endpoint=fault_proxy.endpoint),
        "storage.s3.api.call.attempt.timeout": "120000",
        "storage.s3.api.call.timeout": "120000"}))
    fault_proxy.add(Fault("delay", method="GET", times=None, delay_s=600))
    errors: dict[str, BaseException] = {}

    def caller(name, fn):
        def body():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - handed to the test
                errors[name] = e
        return threading.Thread(target=body, name=name, daemon=True)

    callers = [caller("store loop", lambda: store.get_range(key, 0, 10)),
               caller("thread loop", lambda: store.run(store.get_range_async(key, 0, 10))),
               caller("listing", lambda: list(store.list("close-tests/")))]
    for t in callers:
        t.start()
    deadline = time.monotonic() + 60
    while len(fault_proxy.requests("GET")) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(fault_proxy.requests("GET")) == 3
    store.close()
    assert store._calls.pending() == 0
    for t in callers:
        t.join(60)
        assert not t.is_alive(), t.name
    assert sorted(errors) == ["listing", "store loop", "thread loop"], errors
    for name, e in errors.items():
        assert isinstance(e, RemoteStorageError) and "closed" in str(e), (name, repr(e))
        assert f"s3://{s3_server.buckets[0]}/close-tests/" in str(e), (name, str(e))
