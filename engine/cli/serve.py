"""`serve`: a Kafka broker for reading, over the broker's log dirs.

    python -m engine serve --config FILE
    python -m engine serve --bucket s3://bucket/prefix [--store k=v ...] [--config FILE]
                           --state-dir DIR [--refresh-interval-ms N]

Opens the log dirs as `run` does (validated config, process lock, logs recovered, stored
topic overrides applied), runs the RemoteLogManager's copy and expiration tasks and local
retention, and answers Kafka's protocol on `listeners` (engine.protocol): unmodified Kafka
consumers read every partition from its log start, local or tiered, and keep their group
offsets here. PLAINTEXT and SSL listeners (PEM keystore, `engine.protocol.tls`); Metadata
and FindCoordinator give each client the advertised endpoint of the listener it came on.
One stderr line per bound listener (`serve: listening on NAME://host:port`, the real port
when the config says 0). SIGTERM/SIGINT stop it: listeners and connections
close, then the RLM, then the logs, cleanly.

With `--bucket`, a read-only replica of a bucket that a Kafka cluster wrote with the
object-store tier (the Aiven plugin's layout), as Redpanda's remote read replicas: every
topic and partition of the bucket answered from the bucket alone (engine.protocol.replica),
the bucket listed again every `--refresh-interval-ms` so newly uploaded segments are served,
group offsets and the default chunk cache kept in `--state-dir`. The store's settings come
from `--store` and the `rsm.config.*` keys of `--config`, whose listeners, TLS, SASL, ACL
and group settings apply as for a broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import sys
import time
from dataclasses import dataclass

from engine.cli._broker import _DirLocks, cli_errors, open_broker
from engine.cli._bucket_args import key_values
from engine.config import BrokerConfig, ConfigError, load_broker_config, load_properties
from engine.protocol.acl import Authorizer
from engine.protocol.broker import Endpoint, ReadBroker
from engine.protocol.groups import GroupCoordinator
from engine.protocol.log_reader import LogReader
from engine.protocol.replica import BucketReplica, open_replica
from engine.protocol.sasl import MECHANISMS, Credentials
from engine.protocol.server import KafkaServer, parse_listeners
from engine.protocol.tls import server_context

__all__ = ["run"]

log = logging.getLogger("engine.protocol.server")


def _node_id(broker) -> int:
    for key in ("node.id", "broker.id"):
        if broker[key] >= 0:
            return broker[key]
    return 0


def _loop_errors(loop, context) -> None:
    """A client's failed TLS handshake or dropped connection is one log line, not a
    traceback; anything else goes to asyncio's default handler."""
    exc = context.get("exception")
    if isinstance(exc, (ssl.SSLError, ConnectionError)):
        peer = context.get("transport") and context["transport"].get_extra_info("peername")
        log.info("connection from %s failed: %s", peer, exc)
        return
    loop.default_exception_handler(context)


def _endpoints(bound, advertised, node_id: int) -> dict:
    """Listener name -> Endpoint: its `advertised.listeners` entry, else its own address
    (the bound port when the config says 0, the host `localhost` when it is empty)."""
    by_name = {a.name: a for a in advertised}
    out = {}
    for lst, port in bound:
        adv = by_name.get(lst.name, lst)
        out[lst.name] = Endpoint(node_id, adv.host or lst.host or "localhost",
                                 adv.port or port)
    return out


@dataclass(frozen=True)
class _Listen:
    """The listeners of the broker file, as bound and advertised, and their security."""

    listeners: list
    advertised: list
    ssl_context: ssl.SSLContext | None
    security: dict


async def _serve(broker, listen: _Listen, read_broker, coordinator, housekeeping,
                 started=lambda: None, stopping: str = "") -> None:
    """Serves until SIGTERM/SIGINT, running `housekeeping` on the I/O threads between
    waits of `housekeeping.every_s`; `started` runs once the listeners are bound."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.set_exception_handler(_loop_errors)
    server = KafkaServer(read_broker, broker, coordinator=coordinator, **listen.security)
    try:
        bound = await server.start(listen.listeners, listen.ssl_context)
    except BaseException:
        await server.close()
        coordinator.close()
        raise
    try:
        server.endpoints = _endpoints(bound, listen.advertised, _node_id(broker))
        coordinator.start()
        for lst, port in bound:
            ep = server.endpoints[lst.name]
            print(f"serve: listening on {lst.uri(port)} (node {ep.node_id}, advertised "
                  f"{ep.host}:{ep.port})", file=sys.stderr, flush=True)
        started()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), housekeeping.every_s)
            except TimeoutError:
                await server.run_blocking(housekeeping.run)
                server.data_changed()  # long-polling fetches look at their ends again
    finally:
        print(f"serve: stopping: closing listeners{stopping}", file=sys.stderr, flush=True)
        await server.close()
        coordinator.close()


async def _serve_logs(session, broker, listen: _Listen) -> None:
    rlm = session.remote_log_manager()
    manager = session.log_manager
    read_broker = ReadBroker(LogReader(manager, rlm))
    coordinator = GroupCoordinator.open(broker, manager.log_dirs[0], read_broker.reader)
    await _serve(broker, listen, read_broker, coordinator, _Housekeeping(manager, broker),
                 rlm.start, ", the remote log manager and the logs")


class _Housekeeping:
    """Local retention every `log.retention.check.interval.ms` (as `run`), and the log
    start offsets moved by remote expiration checkpointed."""

    def __init__(self, manager, broker) -> None:
        self.manager = manager
        self.retention_s = broker["log.retention.check.interval.ms"] / 1000
        self.every_s = min(1.0, self.retention_s)
        self.next_cleanup = time.monotonic() + self.retention_s

    def run(self) -> None:
        if time.monotonic() >= self.next_cleanup:
            self.manager.cleanup_logs()
            self.manager.checkpoint_log_start_offsets()
            self.next_cleanup = time.monotonic() + self.retention_s
        self.manager.maybe_checkpoint_log_start_offsets()


class _Refresh:
    """Lists the bucket again every `--refresh-interval-ms`; a failed listing keeps what
    was served (one warning)."""

    def __init__(self, replica: BucketReplica, read_broker: ReadBroker,
                 interval_ms: int) -> None:
        self.replica = replica
        self.read_broker = read_broker
        self.every_s = interval_ms / 1000

    def run(self) -> None:
        try:
            self.replica.refresh()
            self.read_broker.refresh_topics()
        except Exception as exc:  # noqa: BLE001 - a failed listing never stops the server
            log.warning("bucket %s not listed again: %s: %s", self.replica.url,
                        type(exc).__name__, exc)


def _listen(broker, config_path) -> _Listen:
    """The listeners, their TLS context and SASL credentials, and the authorizer."""
    protocol_map = broker["listener.security.protocol.map"]
    listeners = parse_listeners(broker["listeners"], file=config_path,
                                protocol_map=protocol_map)
    advertised = parse_listeners(broker["advertised.listeners"] or broker["listeners"],
                                 "advertised.listeners", file=config_path,
                                 protocol_map=protocol_map)
    ssl_context = (server_context(broker, config_path)
                   if any(lst.protocol in ("SSL", "SASL_SSL") for lst in listeners) else None)
    credentials = None
    if any(lst.protocol.startswith("SASL_") for lst in listeners):
        mechanisms = broker["sasl.enabled.mechanisms"]
        if not mechanisms or any(m not in MECHANISMS for m in mechanisms):
            raise ConfigError("sasl.enabled.mechanisms", ",".join(mechanisms),
                              f"SASL listeners need mechanisms among {', '.join(MECHANISMS)}",
                              file=config_path)
        if not broker["engine.sasl.credentials.file"]:
            raise ConfigError("engine.sasl.credentials.file", None, "SASL listeners need "
                              "a credentials file", file=config_path)
        credentials = Credentials(broker["engine.sasl.credentials.file"])
    return _Listen(listeners, advertised, ssl_context,
                   {"authorizer": Authorizer.from_config(broker), "credentials": credentials})


def _run_bucket(args) -> int:
    """`serve --bucket`: a read-only replica of the bucket, its group offsets and chunk
    cache in `--state-dir` (locked as a log dir is)."""
    store = key_values("--store", args.store)
    if args.state_dir is None:
        raise ConfigError("--state-dir", None, "serve --bucket keeps committed group offsets "
                                               "and the chunk cache there")
    props = load_properties(args.config) if args.config is not None else {}
    broker = BrokerConfig(props)
    listen = _listen(broker, args.config)
    os.makedirs(args.state_dir, exist_ok=True)
    lock = _DirLocks([args.state_dir])
    try:
        replica = open_replica(args.bucket, store, props, args.state_dir)
        try:
            read_broker = ReadBroker(replica)
            topics = replica.topics()
            print(f"serve: bucket {args.bucket}: {sum(map(len, topics.values()))} partitions "
                  f"of {len(topics)} topics", file=sys.stderr, flush=True)
            coordinator = GroupCoordinator.open(broker, args.state_dir, replica)
            asyncio.run(_serve(broker, listen, read_broker, coordinator,
                               _Refresh(replica, read_broker, args.refresh_interval_ms),
                               stopping=" and the bucket"))
        finally:
            replica.close()
    finally:
        lock.release()
    print("serve: stopped cleanly", file=sys.stderr, flush=True)
    return 0


@cli_errors
def run(args) -> int:
    logging.basicConfig(level=logging.WARNING, format="serve: %(levelname)s %(name)s: %(message)s")
    if args.bucket is not None:
        return _run_bucket(args)
    if args.config is None:
        raise ConfigError("--config", None, "serve needs the broker file (or --bucket URL)")
    if args.store or args.state_dir is not None:
        raise ConfigError("--store" if args.store else "--state-dir",
                          (args.store or [args.state_dir])[0], "only with --bucket")
    broker = load_broker_config(args.config)
    if not broker["remote.log.storage.system.enable"]:
        raise ConfigError("remote.log.storage.system.enable", False,
                          "serve reads through the RemoteLogManager: tiered storage must be "
                          "enabled", file=args.config)
    listen = _listen(broker, args.config)
    with open_broker(args.config) as session:
        asyncio.run(_serve_logs(session, broker, listen))
    print("serve: stopped cleanly", file=sys.stderr, flush=True)
    return 0
