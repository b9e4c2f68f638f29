"""`serve`: a Kafka broker for reading, over the broker's log dirs.

    python -m engine serve --config FILE

Opens the log dirs as `run` does (validated config, process lock, logs recovered, stored
topic overrides applied), runs the RemoteLogManager's copy and expiration tasks and local
retention, and answers Kafka's protocol on `listeners` (engine.protocol): unmodified Kafka
consumers read every partition from its log start, local or tiered, and keep their group
offsets here. PLAINTEXT and SSL listeners (PEM keystore, `engine.protocol.tls`); Metadata
and FindCoordinator give each client the advertised endpoint of the listener it came on.
One stderr line per bound listener (`serve: listening on NAME://host:port`, the real port
when the config says 0). SIGTERM/SIGINT stop it: listeners and connections
close, then the RLM, then the logs, cleanly.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import sys
import time

from engine.cli._broker import cli_errors, open_broker
from engine.config import ConfigError, load_broker_config
from engine.protocol.acl import Authorizer
from engine.protocol.broker import Endpoint, ReadBroker
from engine.protocol.groups import GroupCoordinator
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


async def _serve(session, broker, listeners, advertised, ssl_context, security) -> None:
    rlm = session.remote_log_manager()
    manager = session.log_manager
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.set_exception_handler(_loop_errors)
    read_broker = ReadBroker(manager, rlm)
    coordinator = GroupCoordinator.open(broker, manager.log_dirs[0], manager)
    server = KafkaServer(read_broker, broker, coordinator=coordinator, **security)
    housekeeping = _Housekeeping(manager, broker)
    try:
        bound = await server.start(listeners, ssl_context)
    except BaseException:
        await server.close()
        coordinator.close()
        raise
    try:
        server.endpoints = _endpoints(bound, advertised, _node_id(broker))
        coordinator.start()
        for lst, port in bound:
            ep = server.endpoints[lst.name]
            print(f"serve: listening on {lst.uri(port)} (node {ep.node_id}, advertised "
                  f"{ep.host}:{ep.port})", file=sys.stderr, flush=True)
        rlm.start()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), housekeeping.every_s)
            except TimeoutError:
                await server.run_blocking(housekeeping.run)
    finally:
        print("serve: stopping: closing listeners, the remote log manager and the logs",
              file=sys.stderr, flush=True)
        await server.close()
        coordinator.close()


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


@cli_errors
def run(args) -> int:
    logging.basicConfig(level=logging.WARNING, format="serve: %(levelname)s %(name)s: %(message)s")
    broker = load_broker_config(args.config)
    if not broker["remote.log.storage.system.enable"]:
        raise ConfigError("remote.log.storage.system.enable", False,
                          "serve reads through the RemoteLogManager: tiered storage must be "
                          "enabled", file=args.config)
    protocol_map = broker["listener.security.protocol.map"]
    listeners = parse_listeners(broker["listeners"], file=args.config,
                                protocol_map=protocol_map)
    advertised = parse_listeners(broker["advertised.listeners"] or broker["listeners"],
                                 "advertised.listeners", file=args.config,
                                 protocol_map=protocol_map)
    ssl_context = (server_context(broker, args.config)
                   if any(lst.protocol in ("SSL", "SASL_SSL") for lst in listeners) else None)
    credentials = None
    if any(lst.protocol.startswith("SASL_") for lst in listeners):
        mechanisms = broker["sasl.enabled.mechanisms"]
        if not mechanisms or any(m not in MECHANISMS for m in mechanisms):
            raise ConfigError("sasl.enabled.mechanisms", ",".join(mechanisms),
                              f"SASL listeners need mechanisms among {', '.join(MECHANISMS)}",
                              file=args.config)
        if not broker["engine.sasl.credentials.file"]:
            raise ConfigError("engine.sasl.credentials.file", None, "SASL listeners need "
                              "a credentials file", file=args.config)
        credentials = Credentials(broker["engine.sasl.credentials.file"])
    authorizer = Authorizer.from_config(broker)
    with open_broker(args.config) as session:
        asyncio.run(_serve(session, broker, listeners, advertised, ssl_context,
                           {"authorizer": authorizer, "credentials": credentials}))
    print("serve: stopped cleanly", file=sys.stderr, flush=True)
    return 0
