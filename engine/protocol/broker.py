"""The read APIs of `serve`: ApiVersions, Metadata, ListOffsets, Fetch, DescribeConfigs and
the refusal of Produce, answered as one Kafka broker that leads every partition of a
PartitionReader (engine.protocol.partition_reader): a broker's log dirs read through the
RemoteLogManager (engine.protocol.log_reader) or a bucket alone (engine.protocol.replica).

Each handler takes the decoded request body (engine.protocol.codec) and returns the response
body. The blocking ones (`list_offsets`, `fetch_once`) run on the server's I/O threads, never
on the event loop. Fetch returns the record views the reader's `fetch` returns (local
segment views, remote chunk views): record bytes are never decoded or re-encoded, only cut
at batch boundaries to honour the response byte limit. For a plain TCP listener the local
ones become FileRegions (engine.records.file_region), which the server sends with sendfile.

Kafka's behaviours kept here:
- KIP-74: each partition is read with min(its partition_max_bytes, the response bytes
  left); only the first batch of the response may pass `max_bytes` (a consumer must make
  progress);
- a remote read that outlasts `remote.fetch.max.wait.ms` answers its partition with no error
  and no records (Kafka's expired DelayedRemoteFetch: the consumer fetches again; the Java
  consumer throws from poll() on a per-partition REQUEST_TIMED_OUT); one the full reader
  queue refuses answers UNKNOWN_SERVER_ERROR;
- incremental fetch sessions are declined as a broker without session slots declines them:
  a full fetch (epoch 0 or -1) is served with session id 0, whatever session it names (Kafka
  closes that one); an incremental fetch gets FETCH_SESSION_ID_NOT_FOUND;
- read_uncommitted answers null aborted transactions; read_committed stops at the last
  stable offset and lists the aborted transactions of what it returns;
- ListOffsets v0 answers offsets arrays as Kafka's legacy path does (the reader's
  `legacy_offsets`), at most max_num_offsets, highest first;
- DescribeConfigs, served when the reader has topic configs, answers topic resources with
  each config's source, as kafka-configs.sh shows them, and its declared type
  (engine.config.definitions: INT, LONG, ...);
- a write (Produce) is answered NOT_LEADER_OR_FOLLOWER for every partition, as Kafka's
  read-only replica answers it (acks=0 gets no answer). Produce stays advertised: librdkafka
  derives its message format v2 feature from Produce v3 in ApiVersions, and without it its
  consumers refuse to fetch at all. The cost: producers retry until their delivery timeout.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from engine.config.definitions import TOPIC_CONFIGS
from engine.errors import UnknownTopicOrPartitionError
from engine.protocol import errors as E
from engine.protocol.acl import CLUSTER_NAME, authorized_operations
from engine.protocol.messages import API_VERSIONS
from engine.protocol.partition_reader import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    PartitionReader,
    TopicConfigs,
)

__all__ = ["Endpoint", "ReadBroker", "whole_batches"]

log = logging.getLogger(__name__)

_BATCH_HEAD = struct.Struct(">qi")
_LOG_OVERHEAD = 12
ZERO_UUID = b"\x00" * 16
#: local records smaller than this are written from their view: sendfile's set-up (the
#: transport's buffer drained first, a descriptor dup) costs more than copying them
SENDFILE_MIN_BYTES = 32 * 1024


#: DescribeConfigsResponse.ConfigSource and ConfigType codes
_CONFIG_SOURCES = {"DYNAMIC_TOPIC_CONFIG": 1, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5}
_CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
                 "LIST": 7, "CLASS": 8, "PASSWORD": 9}


def _config_text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _allow_all(operation: str, resource_type: str, name: str) -> bool:
    return True


@dataclass(frozen=True)
class Endpoint:
    """Where clients reach this node (the advertised listener)."""

    node_id: int
    host: str
    port: int


def whole_batches(view: memoryview, limit: int) -> memoryview:
    """The longest prefix of `view` made of whole batches and at most `limit` bytes."""
    pos, n = 0, view.nbytes
    while pos + _LOG_OVERHEAD <= n:
        size = _LOG_OVERHEAD + _BATCH_HEAD.unpack_from(view, pos)[1]
        if pos + size > limit or pos + size > n:
            break
        pos += size
    return view[:pos]


class ReadBroker:
    """One broker leading every partition of `reader`; see the module docstring."""

    def __init__(self, reader: PartitionReader) -> None:
        self.reader = reader
        self.cluster_id = reader.cluster_id
        self.topic_ids: dict[str, bytes] = {}
        self.topics_by_id: dict[bytes, str] = {}
        self.refresh_topics()

    @property
    def describes_configs(self) -> bool:
        """Whether DescribeConfigs is answered (the reader knows topic configs)."""
        return isinstance(self.reader, TopicConfigs)

    # -- topics ----------------------------------------------------------------------------

    def refresh_topics(self) -> None:
        """Takes the reader's topics and their ids (after the reader's partitions changed)."""
        ids = {topic: bytes(self.reader.topic_id(topic)) for topic in self.reader.topics()}
        self.topic_ids = ids
        self.topics_by_id = {raw: topic for topic, raw in ids.items()}

    def partitions_of(self, topic: str) -> list[int]:
        return self.reader.topics().get(topic, [])

    def topics(self) -> list[str]:
        return list(self.reader.topics())

    def leader_epoch_of(self, topic: str, partition: int) -> int:
        return self.reader.leader_epoch(topic, partition)

    def leader_epoch_error(self, topic: str, partition: int, current: int) -> int:
        """Kafka's check of a request's `current_leader_epoch` against the partition's: an
        older one is FENCED_LEADER_EPOCH (the client's metadata is stale), a newer one
        UNKNOWN_LEADER_EPOCH (this broker is behind); -1 is not checked, nor is a partition
        this broker does not have (its read answers that)."""
        if current < 0:
            return E.NONE
        try:
            epoch = self.leader_epoch_of(topic, partition)
        except Exception:  # noqa: BLE001 - no such partition: its read says so
            return E.NONE
        if current < epoch:
            return E.FENCED_LEADER_EPOCH
        return E.UNKNOWN_LEADER_EPOCH if current > epoch else E.NONE

    # -- ApiVersions, Metadata -------------------------------------------------------------

    @staticmethod
    def api_versions(keys, error_code: int = E.NONE) -> dict:
        """The versions of the APIs in `keys` (those the server answers)."""
        return {"error_code": error_code,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                             for k, (_, lo, hi, _) in sorted(API_VERSIONS.items())
                             if k in keys]}

    def metadata(self, body: dict, version: int, ep: Endpoint, allowed=_allow_all) -> dict:
        """Every partition led by this node, reached at `ep` (the advertised endpoint of
        the listener the request came on). Listing all topics shows those the principal may
        DESCRIBE; a named one it may not gets TOPIC_AUTHORIZATION_FAILED (asked by id: a
        null name and the id, as Kafka answers; ids are not secret, names are). The
        authorized operations are computed when asked (acl.authorized_operations)."""
        requested = body["topics"]
        topics = []
        if requested is None or (version == 0 and not requested):
            names = [t for t in self.topics() if allowed("describe", "topic", t)]
        else:
            names = []
            for t in requested:
                name = t.get("name")
                topic_id = bytes(t.get("topic_id", ZERO_UUID))
                if name is None and topic_id != ZERO_UUID:
                    name = self.topics_by_id.get(topic_id)
                    if name is None or not allowed("describe", "topic", name):
                        topics.append({"error_code": E.UNKNOWN_TOPIC_ID if name is None
                                       else E.TOPIC_AUTHORIZATION_FAILED, "name": None,
                                       "topic_id": topic_id, "partitions": []})
                        continue
                names.append(name)
        for name in names:
            if not allowed("describe", "topic", name):
                topics.append({"error_code": E.TOPIC_AUTHORIZATION_FAILED, "name": name,
                               "topic_id": ZERO_UUID, "partitions": []})
                continue
            topics.append(self._topic_metadata(name, ep))
            if body.get("include_topic_authorized_operations"):
                topics[-1]["topic_authorized_operations"] = authorized_operations(
                    allowed, "topic", name)
        out = {"brokers": [{"node_id": ep.node_id, "host": ep.host, "port": ep.port,
                            "rack": None}],
               "cluster_id": self.cluster_id, "controller_id": ep.node_id, "topics": topics}
        if body.get("include_cluster_authorized_operations") and 8 <= version <= 10:
            out["cluster_authorized_operations"] = (
                authorized_operations(allowed, "cluster", CLUSTER_NAME)
                if allowed("describe", "cluster", CLUSTER_NAME) else 0)
        return out

    def _topic_metadata(self, name: str, ep: Endpoint) -> dict:
        partitions = self.partitions_of(name)
        if not partitions:
            return {"error_code": E.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                    "topic_id": ZERO_UUID, "partitions": []}
        rows = [{"error_code": E.NONE, "partition_index": p, "leader_id": ep.node_id,
                 "leader_epoch": self.leader_epoch_of(name, p),
                 "replica_nodes": [ep.node_id], "isr_nodes": [ep.node_id],
                 "offline_replicas": []} for p in partitions]
        return {"error_code": E.NONE, "name": name,
                "topic_id": self.topic_ids.get(name, ZERO_UUID), "is_internal": False,
                "partitions": rows}

    # -- ListOffsets -----------------------------------------------------------------------

    def _fetchable(self, topic: str, partition: int, spec: int, found: tuple[int, int, int],
                   read_committed: bool, client: bool) -> tuple[int, int, int]:
        """`found`, or -1/-1 as Kafka answers when a by-time spec (a timestamp, max
        timestamp, latest tiered) found an offset a consumer may not fetch: at or past the
        last stable offset (read_committed) or the high watermark (read_uncommitted; past
        the log end for a request that is not a consumer's)."""
        offset = found[1]
        if spec in (LATEST, EARLIEST, EARLIEST_LOCAL) or offset < 0:
            return found
        log_ = self.reader.log_offsets(topic, partition)
        end = ((log_.last_stable_offset if read_committed else log_.high_watermark)
               if client else log_.log_end_offset)
        return found if offset < end else (-1, -1, -1)

    def _list_offsets_row(self, topic: str, p: dict, read_committed: bool,
                          client: bool) -> dict:
        partition = p["partition_index"]
        row = {"partition_index": partition,
               "error_code": self.leader_epoch_error(topic, partition,
                                                     p["current_leader_epoch"])}
        if row["error_code"]:
            return row
        if p["timestamp"] < LATEST_TIERED:
            log.info("ListOffsets %s-%s: offset spec %s is not supported", topic, partition,
                     p["timestamp"])
            row["error_code"] = E.INVALID_REQUEST
            return row
        try:
            ts, offset, epoch = self._fetchable(
                topic, partition, p["timestamp"],
                self.reader.list_offset(topic, partition, p["timestamp"], read_committed),
                read_committed, client)
            row.update(timestamp=ts, offset=offset, leader_epoch=epoch)
        except Exception as exc:  # noqa: BLE001 - one partition fails alone
            row["error_code"] = E.error_code(exc)
            if row["error_code"] == E.KAFKA_STORAGE_ERROR:  # damage: the error names it
                log.error("ListOffsets %s-%s failed: %s", topic, partition, exc)
            elif row["error_code"] == E.UNKNOWN_SERVER_ERROR:
                log.warning("ListOffsets %s-%s failed: %s", topic, partition, exc)
        return row

    def _legacy_offsets_row(self, topic: str, p: dict, read_committed: bool,
                            client: bool) -> dict:
        """A ListOffsets v0 partition: only latest (-1) and earliest (-2) of the negative
        specs, answered with an offsets array (`legacy_offsets`)."""
        row = {"partition_index": p["partition_index"], "error_code": E.NONE,
               "old_style_offsets": []}
        if p["timestamp"] < EARLIEST:
            row["error_code"] = E.UNSUPPORTED_VERSION
            return row
        try:
            row["old_style_offsets"] = self.reader.legacy_offsets(
                topic, p["partition_index"], p["timestamp"], p["max_num_offsets"], client)
        except Exception as exc:  # noqa: BLE001 - one partition fails alone
            row["error_code"] = E.error_code(exc)
            if row["error_code"] in (E.KAFKA_STORAGE_ERROR, E.UNKNOWN_SERVER_ERROR):
                log.warning("ListOffsets v0 %s-%s failed: %s", topic, p["partition_index"],
                            exc)
        return row

    def list_offsets(self, body: dict, version: int, allowed=_allow_all) -> dict:
        read_committed = body["isolation_level"] == 1
        client = body["replica_id"] == -1
        row_of = self._legacy_offsets_row if version == 0 else self._list_offsets_row
        topics = []
        for t in body["topics"]:
            if allowed("describe", "topic", t["name"]):
                rows = [row_of(t["name"], p, read_committed, client) for p in t["partitions"]]
            else:
                rows = [{"partition_index": p["partition_index"],
                         "error_code": E.TOPIC_AUTHORIZATION_FAILED}
                        for p in t["partitions"]]
            topics.append({"name": t["name"], "partitions": rows})
        return {"topics": topics}

    # -- Fetch -----------------------------------------------------------------------------

    def fetch_targets(self, body: dict, version: int, allowed=_allow_all) -> list:
        """[(topic response dict, topic name, None for an unknown id, or an error code,
        [partition request dicts])]"""
        out = []
        name: str | int | None
        for t in body["topics"]:
            if version >= 13:
                name = self.topics_by_id.get(bytes(t["topic_id"]))
                head = {"topic_id": t["topic_id"]}
            else:
                name = t["topic"]
                head = {"topic": name}
            if name is not None and not allowed("read", "topic", name):
                name = E.TOPIC_AUTHORIZATION_FAILED
            out.append((head, name, t["partitions"]))
        return out

    def end_offsets(self, targets, read_committed: bool) -> list:
        """The offsets a long poll watches: each partition's visible end."""
        ends = []
        for _, name, parts in targets:
            for p in parts:
                offsets = (self.reader.log_offsets(name, p["partition"])
                           if isinstance(name, str) else None)
                ends.append(None if offsets is None else (
                    offsets.last_stable_offset if read_committed else offsets.high_watermark))
        return ends

    def fetch_once(self, targets, max_bytes: int, read_committed: bool,
                   version: int, file_regions: bool = False) -> tuple[list, int]:
        """One pass over the requested partitions: (responses, record bytes). With
        `file_regions`, records of a local segment of at least SENDFILE_MIN_BYTES are a
        FileRegion (sent with sendfile), others views."""
        responses, requests, slots = self.fetch_requests(targets, max_bytes)
        total = 0
        for (row, _), request, data in zip(slots, requests,
                                           self.reader.fetch(requests, read_committed)):
            if data.error is not None or data.offsets is None:
                error = data.error or UnknownTopicOrPartitionError.no_log(*request[:2])
                row["error_code"] = E.error_code(error)
                if row["error_code"] == E.UNKNOWN_SERVER_ERROR:
                    log.warning("Fetch %s-%s at %s failed: %s", *request[:3], error)
                continue
            row["high_watermark"] = data.offsets.high_watermark
            row["last_stable_offset"] = data.offsets.last_stable_offset
            row["log_start_offset"] = data.offsets.log_start_offset
            total = self.add_records(row, data.records, data.aborted_transactions,
                                     total, min(request[3], max_bytes - total),
                                     read_committed)
            view = row["records"]
            if file_regions and view.nbytes >= SENDFILE_MIN_BYTES and \
                    data.local_segment is not None:
                row["records"] = data.local_segment.file_region(data.local_position,
                                                                view) or view
        return responses, total

    def fetch_requests(self, targets, max_bytes: int) -> tuple[list, list, list]:
        """A Fetch's response skeleton and the reads it needs: (responses, requests, slots),
        with a (row, topic) slot for each (topic, partition, offset, max bytes) request;
        partitions of unknown topic ids, or whose current leader epoch is not the
        partition's (`leader_epoch_error`), get their error and no request.

        KIP-74: Kafka reads the partitions in turn, each with min(its partition_max_bytes,
        the response bytes left), the first one with data whole past that limit by one
        batch at most. The reads here run at once, so each is bounded by min(partition
        max, max_bytes) and `add_records` cuts them to what is left in request order: the
        same records."""
        responses, requests, slots = [], [], []
        for head, name, parts in targets:
            rows = []
            for p in parts:
                row = {"partition_index": p["partition"], "error_code": E.NONE,
                       "high_watermark": -1, "last_stable_offset": -1,
                       "log_start_offset": -1, "aborted_transactions": None,
                       "preferred_read_replica": -1, "records": b""}
                rows.append(row)
                if not isinstance(name, str):
                    row["error_code"] = E.UNKNOWN_TOPIC_ID if name is None else name
                    continue
                row["error_code"] = self.leader_epoch_error(name, p["partition"],
                                                            p["current_leader_epoch"])
                if row["error_code"]:
                    continue
                requests.append((name, p["partition"], p["fetch_offset"],
                                 max(0, min(p["partition_max_bytes"], max_bytes))))
                slots.append((row, name))
            responses.append({**head, "partitions": rows})
        return responses, requests, slots

    @staticmethod
    def add_records(row: dict, records, aborted, total: int, limit: int,
                    read_committed: bool) -> int:
        """Puts a read's records (and, read_committed, its aborted transactions: null when
        the read gives none, as for an expired remote read) into `row`: whole, for the first
        records of the response (they may pass `limit` by their first batch), else the whole
        batches within `limit` (min(partition max, response bytes left)); returns the
        response's record bytes so far."""
        view = memoryview(records)
        if total and view.nbytes > limit:
            view = whole_batches(view, max(0, limit))
        row["records"] = view
        if read_committed and aborted is not None:
            row["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in aborted] if view.nbytes else []
        return total + view.nbytes

    @staticmethod
    def fetch_session_error(body: dict) -> int:
        """Sessions are declined: an incremental fetch (epoch > 0) names a session this
        broker does not have, FETCH_SESSION_ID_NOT_FOUND. A full one (epoch 0 or -1) is
        served whatever session it names: Kafka closes that session and serves it."""
        return E.NONE if body["session_epoch"] in (0, -1) else E.FETCH_SESSION_ID_NOT_FOUND

    # -- DescribeConfigs -------------------------------------------------------------------

    def describe_configs(self, body: dict, version: int, allowed=_allow_all) -> dict:
        """Topic resources: every topic config with its value and Kafka's source (topic
        override, static broker config, default); other resource types are refused."""
        results = []
        for res in body["resources"]:
            row = {"error_code": E.NONE, "error_message": None,
                   "resource_type": res["resource_type"], "resource_name": res["resource_name"],
                   "configs": []}
            results.append(row)
            if res["resource_type"] != E.RESOURCE_TOPIC:
                row.update(error_code=E.INVALID_REQUEST,
                           error_message="only topic configs are described here")
                continue
            if not allowed("describe_configs", "topic", res["resource_name"]):
                row.update(error_code=E.TOPIC_AUTHORIZATION_FAILED,
                           error_message="not authorized to describe its configs")
                continue
            partitions = self.partitions_of(res["resource_name"])
            if not partitions:
                row.update(error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                           error_message=f"no topic {res['resource_name']}")
                continue
            assert isinstance(self.reader, TopicConfigs)  # the server asks only then
            config = self.reader.topic_config(res["resource_name"], partitions[0])
            wanted = res["configuration_keys"]
            for name, resolved in config.items():
                if wanted is not None and name not in wanted:
                    continue
                source = _CONFIG_SOURCES[resolved.source.name]
                value = _config_text(resolved.value)
                synonyms = []
                if body["include_synonyms"] and resolved.source_key and \
                        resolved.source.name == "STATIC_BROKER_CONFIG":
                    synonyms.append({"name": resolved.source_key, "value": value,
                                     "source": source})
                row["configs"].append({
                    "name": name, "value": value, "read_only": False,
                    "is_default": resolved.source.name == "DEFAULT_CONFIG",
                    "config_source": source, "is_sensitive": False, "synonyms": synonyms,
                    # the config's declared type: an INT such as segment.bytes is no LONG
                    "config_type": _CONFIG_TYPES.get(TOPIC_CONFIGS[name].type.name, 0),
                    "documentation": None})
        return {"results": results}

    # -- Produce ---------------------------------------------------------------------------

    @staticmethod
    def produce(body: dict) -> dict | None:
        if body["acks"] == 0:
            return None
        return {"responses": [
            {"name": t["name"], "partition_responses": [
                {"index": p["index"], "error_code": E.NOT_LEADER_OR_FOLLOWER, "base_offset": -1,
                 "error_message": "this endpoint serves reads only"}
                for p in t["partition_data"]]}
            for t in body["topic_data"]]}

