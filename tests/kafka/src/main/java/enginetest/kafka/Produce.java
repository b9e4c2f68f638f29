package enginetest.kafka;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** `produce --topic T --count N [--seed S] [--partition P] [--compression C]
 *  [--transactional-id ID --transaction-size K [--abort-every A]] [--base-timestamp MS]
 *  [--timestamp-step MS] [--value-size B]`: N records whose keys, values, headers and
 *  timestamps follow from the seed (timestamps from the base, by default the start time),
 *  idempotent with acks=all unless `--property` says otherwise. With a transactional id they go in transactions of K records,
 *  and every A-th transaction is aborted (after its records were acknowledged). One
 *  "produced" line per record, in send order, with where it landed and whether its
 *  transaction committed. */
final class Produce {
    private static final Set<String> OPTIONS = Set.of("bootstrap", "property", "topic", "count",
            "seed", "partition", "compression", "transactional-id", "transaction-size",
            "abort-every", "base-timestamp", "timestamp-step", "value-size");

    private Produce() {
    }

    static void run(String[] argv) throws Exception {
        Args args = new Args(argv, 1, OPTIONS, Set.of());
        String topic = args.get("topic");
        int count = args.getInt("count", 0);
        Integer partition = args.has("partition") ? Integer.valueOf(args.get("partition")) : null;
        long seed = args.getLong("seed", 0);
        long base = args.getLong("base-timestamp", System.currentTimeMillis());
        long step = args.getLong("timestamp-step", 1);
        int valueSize = args.getInt("value-size", 100);
        boolean transactional = args.has("transactional-id");
        int transactionSize = args.getInt("transaction-size", count);
        int abortEvery = args.getInt("abort-every", 0);
        if (transactionSize <= 0 && count > 0) {
            throw new IllegalArgumentException("--transaction-size must be positive");
        }
        var props = Main.clientProperties(args);
        props.putIfAbsent(ProducerConfig.ACKS_CONFIG, "all");
        props.putIfAbsent(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args.get("compression", "none"));
        if (transactional) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args.get("transactional-id"));
        }
        Random random = new Random(seed);
        try (var producer = new KafkaProducer<>(props, new ByteArraySerializer(),
                new ByteArraySerializer())) {
            if (transactional) {
                producer.initTransactions();
            }
            int chunk = transactional ? transactionSize : Math.max(count, 1);
            for (int start = 0, txn = 0; start < count; start += chunk, txn++) {
                boolean abort = transactional && abortEvery > 0 && (txn + 1) % abortEvery == 0;
                List<ProducerRecord<byte[], byte[]>> sent = new ArrayList<>();
                List<Future<RecordMetadata>> acks = new ArrayList<>();
                if (transactional) {
                    producer.beginTransaction();
                }
                for (int i = start; i < Math.min(count, start + chunk); i++) {
                    var record = record(topic, partition, seed, i, base + i * step, valueSize,
                            random);
                    sent.add(record);
                    acks.add(producer.send(record));
                }
                producer.flush();  // every record acknowledged (offset known) before the end
                if (abort) {
                    producer.abortTransaction();
                } else if (transactional) {
                    producer.commitTransaction();
                }
                for (int j = 0; j < sent.size(); j++) {
                    print(sent.get(j), acks.get(j).get(), !abort, transactional ? txn : null);
                }
                Json.flush();
            }
        }
    }

    /** Record i of the seed: every 10th key null, every 17th value null (a tombstone),
     *  i % 3 headers (the second one with a null value), values of varying length that
     *  compress. */
    static ProducerRecord<byte[], byte[]> record(String topic, Integer partition, long seed,
                                                 int i, long timestamp, int valueSize,
                                                 Random random) {
        byte[] key = i % 10 == 9 ? null
                : ("key-" + seed + "-" + i).getBytes(StandardCharsets.UTF_8);
        byte[] value = null;
        int length = valueSize / 2 + random.nextInt(Math.max(valueSize, 1));
        if (i % 17 != 16) {
            StringBuilder text = new StringBuilder("value-" + seed + "-" + i + "-");
            while (text.length() < length) {
                text.append((char) ('a' + random.nextInt(6)));
            }
            value = text.toString().getBytes(StandardCharsets.UTF_8);
        }
        List<Header> headers = new ArrayList<>();
        for (int h = 0; h < i % 3; h++) {
            byte[] hv = h == 1 ? null : ("hv-" + i + "-" + h).getBytes(StandardCharsets.UTF_8);
            headers.add(new RecordHeader("h" + h, hv));
        }
        return new ProducerRecord<>(topic, partition, timestamp, key, value, headers);
    }

    private static void print(ProducerRecord<byte[], byte[]> record, RecordMetadata meta,
                              boolean committed, Integer transaction) {
        Json.of("produced")
                .put("partition", meta.partition())
                .put("offset", meta.offset())
                .put("timestamp", meta.timestamp())
                .put("key", record.key())
                .put("value", record.value())
                .put("headers", Consume.headers(record.headers()))
                .put("committed", committed)
                .put("transaction", transaction)
                .print();
    }
}
