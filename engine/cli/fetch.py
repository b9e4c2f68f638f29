"""`fetch`: records of one partition as a consumer sees them, served by the
RemoteLogManager's read() from local or remote data.

    python -m engine fetch --config FILE --topic T --partition P --offset O
        [--max-bytes N | --to-end] [--json] [--isolation-level read_committed]

Like a Kafka consumer: records below the fetch offset (in the first batch) are dropped,
control batches are not shown, nothing at or past the high watermark is shown
(read_committed: the last stable offset), and read_committed drops the records of aborted
transactions using the fetch's aborted-transaction list, as the Java consumer does. With
--json each record is one object with exactly dump-log's keys (RECORD_JSON_KEYS). One line
on stderr says how many records were fetched, from where, and the next offset.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from engine.cli._broker import check_topic, cli_errors, open_broker
from engine.cli.dump_log import _record_json, _record_line
from engine.errors import CorruptRecordError
from engine.records import ControlRecordType, MemoryRecords, parse_control_record

__all__ = ["ConsumerView", "run"]


@dataclass
class ConsumerView:
    """A consumer's position in one partition, and how it turns the result of one fetch
    into records (Java's CompletedFetch: for read_committed, the response's aborted
    transactions and the set of producers whose open transaction is aborted, both per
    fetch response, as the broker lists every aborted transaction overlapping it)."""

    position: int
    end: int
    read_committed: bool = False

    def records(self, data, aborted_transactions=()):
        """Yields (batch, record) of `data` (whole batches from one read()) that the
        consumer returns, advancing `position` past every batch consumed (control ones
        too)."""
        pending = sorted(aborted_transactions, key=lambda a: a.first_offset)
        aborted_producers: set[int] = set()
        for batch in MemoryRecords(bytes(data)).batches():
            if batch.last_offset < self.position:
                continue
            if batch.base_offset >= self.end:
                return
            if self.read_committed:
                while pending and pending[0].first_offset <= batch.last_offset:
                    aborted_producers.add(pending.pop(0).producer_id)
                if batch.is_control:
                    for record in batch:
                        marker = parse_control_record(record.key, record.value)
                        if marker.type is ControlRecordType.ABORT:
                            aborted_producers.discard(batch.producer_id)
                    self.position = batch.next_offset
                    continue
                if batch.is_transactional and batch.producer_id in aborted_producers:
                    self.position = batch.next_offset
                    continue
            if batch.is_control:
                self.position = batch.next_offset
                continue
            for record in batch:
                if self.position <= record.offset < self.end:
                    yield batch, record
            self.position = min(batch.next_offset, self.end)


@cli_errors
def run(args) -> int:
    check_topic(args.topic)
    read_committed = args.isolation_level == "read_committed"
    out = sys.stdout
    with open_broker(args.config) as session:
        unified = session.log(args.topic, args.partition)
        rlm = session.reader()  # the RLM, or the local logs of a broker without tiering
        end = unified.last_stable_offset if read_committed else unified.high_watermark
        view = ConsumerView(args.offset, end, read_committed)
        count, remote_fetches, fetches = 0, 0, 0
        first = last = None
        while True:
            result = rlm.read(args.topic, args.partition, view.position, args.max_bytes,
                              min_one_message=True, isolation=args.isolation_level)
            fetches += 1
            remote_fetches += bool(result.from_remote)
            before = view.position
            for batch, record in view.records(result.records, result.aborted_transactions):
                if args.json:
                    obj = _record_json(batch, record, batch.base_offset)
                    out.write(json.dumps(obj) + "\n")
                else:
                    out.write(_record_line(batch, record) + "\n")
                count += 1
                first = record.offset if first is None else first
                last = record.offset
            if not args.to_end or view.position >= end:
                break
            if view.position == before:  # below the end: an empty answer is no end
                raise CorruptRecordError(
                    f"partition {args.topic}-{args.partition}: a read at offset "
                    f"{view.position} returned no record batch below the "
                    f"{'last stable offset' if read_committed else 'high watermark'} {end}",
                    offset=view.position)
        print(f"fetched {count} records"
              + (f" (offsets {first}..{last})" if count else "")
              + f" in {fetches} read(s), {remote_fetches} from the remote tier; "
              f"next offset {view.position}, "
              f"{'last stable offset' if read_committed else 'high watermark'} {end}",
              file=sys.stderr)
    return 0
