package enginetest.kafka;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/** `consume --topic T (--partitions 0,1 | --subscribe) [--group G] [--group-instance-id I]
 *  [--isolation read_committed|read_uncommitted] [--from earliest|latest|OFFSET]
 *  [--max-records N] [--idle-ms MS] [--timeout-ms MS] [--poll-delay-ms MS] [--commit]`:
 *  one "record" line per record consumed, and last an "end" line (count, positions of the
 *  assigned partitions, and whether the overall timeout cut it short). It stops at N
 *  records, or once nothing arrived for the idle time while partitions were assigned.
 *  With --commit it commits its positions synchronously after every poll that returned
 *  records and, subscribed, in onPartitionsRevoked (so a rebalance loses no progress).
 *  Subscribed, it prints "assigned", "revoked" and "lost" lines as the group rebalances.
 *  --poll-delay-ms sleeps after each poll that returned records (slow processing).
 *  <p>`offsets-for-times --topic T --partitions 0,1 --timestamp MS [--timestamp MS...]
 *  [--isolation I]`: KafkaConsumer.offsetsForTimes, one "offset-for-time" line per
 *  timestamp and partition (offset and timestamp null where no record is at or after it). */
final class Consume {
    private static final Set<String> OPTIONS = Set.of("bootstrap", "property", "topic",
            "partitions", "group", "group-instance-id", "isolation", "from", "max-records",
            "idle-ms", "timeout-ms", "poll-delay-ms");
    private static final Set<String> FLAGS = Set.of("subscribe", "commit");
    private static final Set<String> TIMES_OPTIONS = Set.of("bootstrap", "property", "topic",
            "partitions", "timestamp", "isolation");

    private Consume() {
    }

    static void run(String[] argv) throws InterruptedException {
        Args args = new Args(argv, 1, OPTIONS, FLAGS);
        String topic = args.get("topic");
        String from = args.get("from", "earliest");
        boolean subscribe = args.has("subscribe");
        if (subscribe == args.has("partitions")) {
            throw new IllegalArgumentException("give exactly one of --subscribe, --partitions");
        }
        if (subscribe && !from.equals("earliest") && !from.equals("latest")) {
            throw new IllegalArgumentException("--subscribe starts from earliest or latest");
        }
        var props = Main.clientProperties(args);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, args.get("isolation", "read_uncommitted"));
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, subscribe ? from : "earliest");
        if (args.has("group")) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        }
        if (args.has("group-instance-id")) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, args.get("group-instance-id"));
        }
        Json end;
        try (var consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(),
                new ByteArrayDeserializer())) {
            if (subscribe) {
                consumer.subscribe(List.of(topic), new Listener(consumer, args.has("commit")));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                for (int p : args.ints("partitions")) {
                    tps.add(new TopicPartition(topic, p));
                }
                consumer.assign(tps);
                seek(consumer, tps, from);
            }
            end = loop(consumer, args);
        }
        end.print();  // the last line, after what closing printed (a final "revoked")
    }

    static void offsetsForTimes(String[] argv) {
        Args args = new Args(argv, 1, TIMES_OPTIONS, Set.of());
        var props = Main.clientProperties(args);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, args.get("isolation", "read_uncommitted"));
        try (var consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(),
                new ByteArrayDeserializer())) {
            for (String timestamp : args.getAll("timestamp")) {
                Map<TopicPartition, Long> query = new LinkedHashMap<>();
                for (int p : args.ints("partitions")) {
                    query.put(new TopicPartition(args.get("topic"), p), Long.parseLong(timestamp));
                }
                Map<TopicPartition, OffsetAndTimestamp> found = consumer.offsetsForTimes(query);
                for (TopicPartition tp : query.keySet()) {
                    OffsetAndTimestamp at = found.get(tp);
                    Json.of("offset-for-time")
                            .put("partition", tp.partition())
                            .put("query", Long.parseLong(timestamp))
                            .put("offset", at == null ? null : at.offset())
                            .put("timestamp", at == null ? null : at.timestamp())
                            .print();
                }
            }
        }
    }

    private static void seek(KafkaConsumer<byte[], byte[]> consumer,
                             Collection<TopicPartition> tps, String from) {
        if (from.equals("earliest")) {
            consumer.seekToBeginning(tps);
        } else if (from.equals("latest")) {
            consumer.seekToEnd(tps);
        } else {
            long offset = Long.parseLong(from);
            for (TopicPartition tp : tps) {
                consumer.seek(tp, offset);
            }
        }
    }

    /** Polls until done; the "end" line to print once the consumer is closed. */
    private static Json loop(KafkaConsumer<byte[], byte[]> consumer, Args args)
            throws InterruptedException {
        long maxRecords = args.getLong("max-records", Long.MAX_VALUE);
        long pollDelayMs = args.getLong("poll-delay-ms", 0);
        long idleMs = args.getLong("idle-ms", 5000);
        long deadline = System.currentTimeMillis() + args.getLong("timeout-ms", 60000);
        boolean commit = args.has("commit");
        long count = 0;
        long lastProgress = System.currentTimeMillis();
        boolean assigned = false;
        while (count < maxRecords && System.currentTimeMillis() < deadline) {
            var records = consumer.poll(Duration.ofMillis(200));
            long now = System.currentTimeMillis();
            if (!assigned && !consumer.assignment().isEmpty()) {
                assigned = true;  // the idle clock starts once there is something to read
                lastProgress = now;
            }
            for (ConsumerRecord<byte[], byte[]> r : records) {
                print(r);
                count++;
            }
            Json.flush();
            if (!records.isEmpty()) {
                lastProgress = now;
                if (commit) {
                    consumer.commitSync();
                }
                Thread.sleep(pollDelayMs);
            } else if (assigned && now - lastProgress >= idleMs) {
                break;
            }
        }
        Map<String, Long> positions = new LinkedHashMap<>();
        for (TopicPartition tp : consumer.assignment()) {
            positions.put(String.valueOf(tp.partition()), consumer.position(tp));
        }
        return Json.of("end")
                .put("count", count)
                .put("positions", positions)
                .put("timed_out", count < maxRecords && System.currentTimeMillis() >= deadline);
    }

    private static void print(ConsumerRecord<byte[], byte[]> r) {
        Json.of("record")
                .put("partition", r.partition())
                .put("offset", r.offset())
                .put("timestamp", r.timestamp())
                .put("timestamp_type", r.timestampType().name)
                .put("key", r.key())
                .put("value", r.value())
                .put("headers", headers(r.headers()))
                .put("leader_epoch", r.leaderEpoch().orElse(null))
                .print();
    }

    /** Prints the group's decisions; commits before giving partitions up when asked to. */
    private static final class Listener implements ConsumerRebalanceListener {
        private final KafkaConsumer<byte[], byte[]> consumer;
        private final boolean commit;

        Listener(KafkaConsumer<byte[], byte[]> consumer, boolean commit) {
            this.consumer = consumer;
            this.commit = commit;
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (commit && !partitions.isEmpty()) {
                consumer.commitSync();
            }
            event("revoked", partitions);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            event("assigned", partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            event("lost", partitions);
        }

        private void event(String type, Collection<TopicPartition> partitions) {
            List<Integer> ids = new ArrayList<>();
            for (TopicPartition tp : partitions) {
                ids.add(tp.partition());
            }
            ids.sort(null);
            Json.of(type).put("partitions", ids).print();
            Json.flush();
        }
    }

    /** Headers as [name, base64 value or null] pairs, in record order. */
    static List<List<Object>> headers(Iterable<Header> headers) {
        List<List<Object>> out = new ArrayList<>();
        for (Header h : headers) {
            List<Object> pair = new ArrayList<>();
            pair.add(h.key());
            pair.add(Json.base64(h.value()));
            out.add(pair);
        }
        return out;
    }
}
