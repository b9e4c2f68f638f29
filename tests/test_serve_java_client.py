"""`python -m engine serve` answering Apache Kafka's own Java consumer (kafka-clients 4.1.1,
the reference client, run through tests/kafka's client program): over the topic of
serve_support (every codec, headers, transactions some of them aborted, early offsets only
in the remote tier), every record the consumer reads from earliest to end, with assign()
and with subscribe() in a group of its own, equals `engine fetch --json`'s view, in both
isolation levels; the group's commits hold, through rebalances, a restart of `serve` and a
static member's restart; Admin.listOffsets and KafkaConsumer.offsetsForTimes answer into the
tier; the Java producer fails with its retriable timeout and writes nothing."""

from __future__ import annotations

import base64
import socket

import pytest
from kafka_cluster import ClientError, ClientProcess, run_client, wait_until
from serve_support import CODECS, TOPIC, Record, ServeProcess, build_tiered_broker, engine


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    # a fixed port: the Java clients reconnect to the same address after serve restarts
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return build_tiered_broker(tmp_path_factory.mktemp("serve"),
                               f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
                               "group.min.session.timeout.ms=1000\n")


class _Serve:
    """The module's `serve`, which a test may restart (same config, same port)."""

    def __init__(self, config: str):
        self.config = config
        self.proc = ServeProcess(config)
        self.bootstrap = self.proc.bootstrap

    def stop(self) -> None:
        assert self.proc.stop() == 0, self.proc.output()
        assert "Traceback" not in self.proc.output(), self.proc.output()

    def restart(self) -> None:
        self.stop()
        self.proc = ServeProcess(self.config)
        assert self.proc.bootstrap == self.bootstrap


@pytest.fixture(scope="module")
def by_time(tiered):
    """(partition, timestamp) -> `engine list-offsets --time <ms>`'s offset, for a timestamp
    inside the tiered range of each partition, and in partition 0 one in the local log and
    one past the last record (read before `serve` holds the log dirs). The engine and the
    Java client see the same timestamps: those of the records and of transaction markers."""
    answers = {}
    for p in range(len(CODECS)):
        records = tiered.view(p, False)
        probes = [next(r for r in records
                       if r.offset >= tiered.offsets[p]["earliest-local"] // 2).timestamp - 1]
        if p == 0:  # the markers' timestamps are a few ms past the last record's
            probes += [next(r for r in records
                            if r.offset > tiered.offsets[p]["earliest-local"]).timestamp,
                       max(r.timestamp for r in records) + 60_000]
        for ms in probes:  # one at a time: each holds the log dirs' lock
            out = engine("list-offsets", "--config", tiered.config, "--topic", TOPIC,
                         "--partition", str(p), "--time", str(ms)).stdout
            answers[(p, ms)] = int(out.strip().rsplit(":", 1)[1])
    return answers


@pytest.fixture(scope="module")
def server(tiered, by_time):
    proc = _Serve(tiered.config)
    yield proc
    proc.stop()


def _b64(text):
    return None if text is None else base64.b64decode(text)


def _by_partition(lines: list[dict]) -> dict[int, list[Record]]:
    got: dict[int, list[Record]] = {}
    for r in lines:
        if r["type"] == "record":
            got.setdefault(r["partition"], []).append(Record(
                r["offset"], r["timestamp"], _b64(r["key"]), _b64(r["value"]),
                [(k, _b64(v)) for k, v in r["headers"]]))
    return got


@pytest.mark.parametrize("subscribe", [False, True], ids=["assign", "subscribe"])
@pytest.mark.parametrize("read_committed", [False, True])
def test_java_consumer_consumes_everything_from_earliest(tiered, server, read_committed,
                                                         subscribe):
    isolation = "read_committed" if read_committed else "read_uncommitted"
    want = {p: tiered.view(p, read_committed) for p in range(len(CODECS))}
    how = (["--subscribe", "--group", f"java-subscribe-{int(read_committed)}", "--commit"]
           if subscribe else
           ["--partitions", ",".join(map(str, want))])
    lines = _consume(server, *how, "--isolation", isolation)
    got = _by_partition(lines)
    for p in want:
        assert len(got.get(p, [])) == len(want[p]), (p, len(got.get(p, [])), len(want[p]))
        assert got[p] == want[p], p
    if read_committed:  # the fixture has aborted transactions: they really are hidden
        assert sum(map(len, want.values())) < sum(len(tiered.view(p, False)) for p in want)
    if subscribe:  # the group committed as it went: it resumes at the end
        again = _consume(server, *how, "--isolation", isolation)
        assert _by_partition(again) == {}
        positions = {int(p): n for p, n in again[-1]["positions"].items()}
        assert sorted(positions) == list(want)  # it was assigned everything, read nothing
        assert all(positions[p] > want[p][-1].offset for p in want), positions


def _consume(server, *args: str) -> list[dict]:
    lines = run_client(["consume", "--bootstrap", server.bootstrap, "--topic", TOPIC, *args,
                        "--idle-ms", "3000", "--timeout-ms", "90000",
                        "--property", "max.partition.fetch.bytes=65536"], timeout=150)
    assert lines[-1]["type"] == "end" and not lines[-1]["timed_out"], lines[-1]
    return lines


def test_java_admin_list_offsets_into_the_tier(tiered, server):
    """Admin.listOffsets: earliest-local, latest-tiered and latest as `engine list-offsets`
    answers them, and a timestamp inside the tiered range finds the first record at or
    after it."""
    partitions = list(range(len(CODECS)))
    probes = {}
    for p in partitions:
        records = tiered.view(p, False)
        probe = next(r for r in records if r.offset >= tiered.offsets[p]["earliest-local"] // 2)
        first = next(r for r in records if r.timestamp >= probe.timestamp)
        assert first.offset < tiered.offsets[p]["earliest-local"]  # the answer is tiered
        probes[p] = (probe.timestamp, first.offset)
    lines = run_client(["list-offsets", "--bootstrap", server.bootstrap, "--topic", TOPIC,
                        "--partitions", ",".join(map(str, partitions)),
                        "--spec", "earliest-local", "--spec", "latest-tiered",
                        "--spec", "latest"], timeout=120)
    got = {(r["spec"], r["partition"]): r["offset"] for r in lines}
    assert got == {(spec, p): tiered.offsets[p][spec] for p in partitions
                   for spec in ("earliest-local", "latest-tiered", "latest")}
    for p, (timestamp, offset) in probes.items():
        [found] = run_client(["list-offsets", "--bootstrap", server.bootstrap, "--topic",
                              TOPIC, "--partitions", str(p), "--spec", str(timestamp)],
                             timeout=120)
        assert found["offset"] == offset, (p, found)


def test_java_group_rebalance_commits_on_revoke(tiered, server):
    """A second member joins while the first is consuming: the first commits in
    onPartitionsRevoked (the rebalance has begun: Kafka accepts a commit from the current
    generation while the group prepares to rebalance), and between them the two members
    read every record once."""
    member = ["consume", "--bootstrap", server.bootstrap, "--topic", TOPIC, "--subscribe",
              "--group", "java-rebalance", "--commit", "--idle-ms", "4000",
              "--timeout-ms", "120000", "--poll-delay-ms", "100",
              "--property", "max.poll.records=50"]
    first = ClientProcess(member)
    try:
        wait_until("the first member's first records",
                   lambda: any(r["type"] == "record" for r in first.lines_so_far()), 60)
        second = run_client(member, timeout=150)
    finally:
        first_lines = first.result(timeout=150)
    assert ("revoked", list(range(len(CODECS)))) in [
        (r["type"], r.get("partitions")) for r in first_lines]
    read = [(r["partition"], r["offset"]) for r in first_lines + second
            if r["type"] == "record"]
    assert len(read) == len(set(read))  # nothing read twice
    got = _by_partition(sorted(first_lines + second,
                               key=lambda r: (r.get("partition", -1), r.get("offset", -1))))
    for p in range(len(CODECS)):
        assert got[p] == tiered.view(p, False), p


def test_java_producer_fails_with_its_retriable_timeout_and_nothing_is_written(tiered, server):
    """serve answers Produce as a Kafka replica that leads nothing: NOT_LEADER_OR_FOLLOWER.
    The Java producer retries it (refreshing metadata, which names serve the leader again)
    until delivery.timeout.ms, then fails the send with its retriable TimeoutException; the
    end offsets do not move and the Java consumer is still served every record."""
    before = _latest(server)
    assert before == {p: tiered.offsets[p]["latest"] for p in before}
    with pytest.raises(ClientError) as failed:
        run_client(["produce", "--bootstrap", server.bootstrap, "--topic", TOPIC,
                    "--partition", "0", "--count", "3",
                    "--property", "enable.idempotence=false", "--property", "acks=1",
                    "--property", "delivery.timeout.ms=4000",
                    "--property", "request.timeout.ms=2000", "--property", "linger.ms=0",
                    "--property", "retry.backoff.ms=100"], timeout=60)
    err = failed.value.stderr
    assert "error: org.apache.kafka.common.errors.TimeoutException: Expiring" in err, err
    assert "retrying" in err and "Error: NOT_LEADER_OR_FOLLOWER" in err, err
    assert not failed.value.lines  # no record was acknowledged
    assert _latest(server) == before
    got = _by_partition(_consume(server, "--partitions", "0"))
    assert got[0] == tiered.view(0, False)


def _latest(server) -> dict[int, int]:
    lines = run_client(["list-offsets", "--bootstrap", server.bootstrap, "--topic", TOPIC,
                        "--partitions", ",".join(map(str, range(len(CODECS)))),
                        "--spec", "latest"], timeout=60)
    return {r["partition"]: r["offset"] for r in lines}


def test_java_consumer_offsets_for_times_into_the_tier(tiered, server, by_time):
    """KafkaConsumer.offsetsForTimes answers as `engine list-offsets --time <ms>`: inside
    the tiered range (the answer below the first local offset), in the local log, and
    none (null) past the last record; each found offset's timestamp is its record's."""
    stamps = sorted({ms for _, ms in by_time})
    lines = run_client(["offsets-for-times", "--bootstrap", server.bootstrap, "--topic", TOPIC,
                        "--partitions", ",".join(map(str, range(len(CODECS)))),
                        *(a for ms in stamps for a in ("--timestamp", str(ms)))], timeout=120)
    got = {(r["partition"], r["query"]): r for r in lines}
    assert sum(0 <= o < tiered.offsets[p]["earliest-local"]
               for (p, _), o in by_time.items()) == len(CODECS)  # one tiered answer each
    assert -1 in by_time.values()
    for (p, ms), offset in by_time.items():
        found = got[(p, ms)]
        if offset < 0:
            assert found["offset"] is None and found["timestamp"] is None, found
            continue
        record = next(r for r in tiered.view(p, False) if r.offset >= offset)
        assert (found["offset"], found["timestamp"]) == (offset, record.timestamp), (p, ms)


def _member(server, group: str, *extra: str) -> list[str]:
    return ["consume", "--bootstrap", server.bootstrap, "--topic", TOPIC, "--subscribe",
            "--group", group, "--commit", "--timeout-ms", "120000", "--poll-delay-ms", "100",
            "--property", "max.poll.records=50", "--property", "session.timeout.ms=30000",
            "--property", "heartbeat.interval.ms=1000", *extra]


def _records_after_assignment(member: ClientProcess, assignments: int) -> bool:
    """Whether the member read a record after its `assignments`-th "assigned" line."""
    seen = 0
    for r in member.lines_so_far():
        seen += r["type"] == "assigned"
        if seen >= assignments and r["type"] == "record":
            return True
    return False


def _group_events(lines: list[dict]) -> list[tuple[str, list[int]]]:
    return [(r["type"], r["partitions"]) for r in lines
            if r["type"] in ("assigned", "revoked", "lost")]


def _check_read_once_each(tiered, *outputs: list[dict]) -> None:
    """Between them the outputs read every record once, as `fetch --json` shows it."""
    lines = [r for out in outputs for r in out if r["type"] == "record"]
    read = [(r["partition"], r["offset"]) for r in lines]
    assert len(read) == len(set(read))  # nothing read twice
    got = _by_partition(sorted(lines, key=lambda r: (r["partition"], r["offset"])))
    for p in range(len(CODECS)):
        assert got[p] == tiered.view(p, False), p


def test_java_group_members_consume_and_commit_across_a_serve_restart(tiered, server):
    """Two members of a group consume and commit; serve restarts under them. Kafka keeps
    group state (members, generation, assignment) across a coordinator restart, and so does
    serve: the members keep their partitions (no rebalance after the restart), commits are
    accepted, and between them they read every record once; the group then resumes at
    the end."""
    group = "java-restart"
    first = ClientProcess(_member(server, group, "--idle-ms", "10000"))
    second = None
    try:
        wait_until("the first member's records", lambda: _records_after_assignment(first, 1), 60)
        second = ClientProcess(_member(server, group, "--idle-ms", "10000"))
        wait_until("both members' records after the rebalance",
                   lambda: (_records_after_assignment(first, 2)
                            and _records_after_assignment(second, 1)), 60)
        marks = [len(first.lines_so_far()), len(second.lines_so_far())]
        server.restart()
        outputs = [first.result(timeout=150), second.result(timeout=150)]
    finally:
        for member in (first, second):
            if member is not None:
                member.kill()
    everything = list(range(len(CODECS)))
    after = []
    for out, mark in zip(outputs, marks, strict=True):
        assert any(r["type"] == "record" for r in out[mark:])  # it read on after the restart
        mine = _group_events(out[:mark])[-1][1]
        *events, close = _group_events(out[mark:])
        assert close[0] == "revoked"  # its own close
        after.append(events)
        # the restart cost no rebalance; the member that outlasted the other one took its
        # partitions when it left
        assert events in ([], [("revoked", mine), ("assigned", everything)]), events
    assert [] in after, after
    _check_read_once_each(tiered, *outputs)
    again = run_client([*_member(server, group, "--idle-ms", "3000")], timeout=120)
    assert not [r for r in again if r["type"] == "record"]
    positions = {int(p): n for p, n in again[-1]["positions"].items()}
    assert positions == {p: tiered.offsets[p]["latest"] for p in range(len(CODECS))}


def test_java_static_member_restarted_takes_its_partitions_back(tiered, server):
    """Static members (group.instance.id, KIP-345): the second member stops (a static
    member sends no LeaveGroup) and starts again within its session timeout: it takes
    its old partitions back with no rebalance (the first member is never revoked nor
    assigned anew) and resumes from its commits; the three runs read every record once."""
    group = "java-static"
    first = ClientProcess(_member(server, group, "--group-instance-id", "first",
                                  "--idle-ms", "12000"))
    try:
        wait_until("the first member's records", lambda: _records_after_assignment(first, 1), 60)
        before = run_client(_member(server, group, "--group-instance-id", "second",
                                    "--max-records", "200", "--idle-ms", "12000"), timeout=120)
        mark = len(first.lines_so_far())
        again = run_client(_member(server, group, "--group-instance-id", "second",
                                   "--idle-ms", "5000"), timeout=120)
        first_lines = first.result(timeout=150)
    finally:
        first.kill()
    [(_, theirs)] = [e for e in _group_events(before) if e[0] == "assigned"]
    assert theirs and [("assigned", theirs), ("revoked", theirs)] == _group_events(before)
    assert _group_events(again) == [("assigned", theirs), ("revoked", theirs)]
    # the first member: assigned everything, then its share when the second joined; the
    # second's restart changed nothing for it (only its own close is after that)
    *events, close = _group_events(first_lines)
    mine = sorted(set(range(len(CODECS))) - set(theirs))
    assert events == [("assigned", list(range(len(CODECS)))), ("revoked", list(range(len(CODECS)))),
                      ("assigned", mine)], events
    assert close == ("revoked", mine)
    assert all(e[0] != "assigned" for e in _group_events(first_lines[mark:]))
    # the restarted member starts where its first run committed (its end positions; the
    # first record at or after one, past a transaction marker)
    starts = {}
    for r in again:
        if r["type"] == "record":
            starts.setdefault(r["partition"], r["offset"])
    committed = {int(p): n for p, n in before[-1]["positions"].items()}
    assert starts == {p: next(r.offset for r in tiered.view(p, False) if r.offset >= n)
                      for p, n in committed.items()
                      if any(r.offset >= n for r in tiered.view(p, False))}, (starts, committed)
    _check_read_once_each(tiered, first_lines, before, again)
