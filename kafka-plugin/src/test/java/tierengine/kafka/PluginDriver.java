package tierengine.kafka;

import java.io.InputStream;
import java.io.OutputStream;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;

import javax.management.MBeanAttributeInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;

/**
 * Drives the plugin as a broker would, without a broker, for the Python tests and benchmarks:
 * {@code PluginDriver <rsm properties> <script>} configures an EngineRemoteStorageManager with
 * the properties and runs the script's commands (one per line: a verb and key=value words),
 * printing one JSON object per command. Errors print their exception class and message.
 */
public final class PluginDriver {
    private PluginDriver() {
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (InputStream in = Files.newInputStream(Paths.get(args[0]))) {
            props.load(in);
        }
        Map<String, Object> configs = new HashMap<>();
        props.forEach((k, v) -> configs.put(String.valueOf(k), String.valueOf(v)));
        EngineRemoteStorageManager rsm = new EngineRemoteStorageManager();
        try {
            rsm.configure(configs);
        } catch (RuntimeException e) {
            System.out.println(error("configure", e));
            System.exit(3);
        }
        System.out.println("{\"cmd\":\"configure\"}");
        for (String line : Files.readAllLines(Paths.get(args[1]))) {
            if (line.isBlank()) {
                continue;
            }
            String[] words = line.trim().split("\\s+");
            Map<String, String> kv = new HashMap<>();
            for (int i = 1; i < words.length; i++) {
                int eq = words[i].indexOf('=');
                kv.put(words[i].substring(0, eq), words[i].substring(eq + 1));
            }
            try {
                long begin = System.nanoTime();
                String result = run(rsm, words[0], kv);
                long elapsed = System.nanoTime() - begin;
                System.out.println(result.substring(0, result.length() - 1)
                        + ",\"elapsed_ns\":" + elapsed + "}");
            } catch (Exception e) {
                System.out.println(error(words[0], e));
            }
            System.out.flush();
        }
        rsm.close();
    }

    private static String run(EngineRemoteStorageManager rsm, String verb, Map<String, String> kv)
            throws Exception {
        switch (verb) {
            case "copy": {
                Optional<CustomMetadata> custom = rsm.copyLogSegmentData(metadata(kv),
                        new LogSegmentData(Paths.get(kv.get("log")), Paths.get(kv.get("offsetIndex")),
                                Paths.get(kv.get("timeIndex")),
                                Optional.ofNullable(kv.get("txnIndex")).map(Paths::get),
                                Paths.get(kv.get("snapshot")),
                                ByteBuffer.wrap(Files.readAllBytes(Paths.get(kv.get("leaderEpoch"))))));
                return "{\"cmd\":\"copy\",\"custom\":" + custom.map(c -> quote(
                        HexFormat.of().formatHex(c.value()))).orElse("null") + "}";
            }
            case "fetch": {
                RemoteLogSegmentMetadata md = metadata(kv);
                int start = Integer.parseInt(kv.getOrDefault("from", "0"));
                byte[] buf = new byte[Integer.parseInt(kv.getOrDefault("chunk", "65536"))];
                long total = 0;
                int first;
                try (InputStream in = kv.containsKey("to")
                        ? rsm.fetchLogSegment(md, start, Integer.parseInt(kv.get("to")))
                        : rsm.fetchLogSegment(md, start);
                     OutputStream out = Files.newOutputStream(Paths.get(kv.get("out")))) {
                    first = in.available();  // the first range the stream pulled
                    for (int n; (n = in.read(buf, 0, buf.length)) >= 0; ) {
                        out.write(buf, 0, n);
                        total += n;
                    }
                }
                return "{\"cmd\":\"fetch\",\"bytes\":" + total + ",\"first_range\":" + first
                        + "}";
            }
            case "ranges": {
                // the segment in fetchLogSegment calls of `range` bytes, each read whole
                RemoteLogSegmentMetadata md = metadata(kv);
                int range = Integer.parseInt(kv.getOrDefault("range", "1048576"));
                byte[] buf = new byte[range];
                long total = 0;
                long opening = 0;
                // this thread's CPU: the calls run on it (warm: no I/O), and unlike wall time it
                // holds still while other processes share the cores
                long cpu = ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime();
                for (int pos = 0; pos < md.segmentSizeInBytes(); pos += range) {
                    int last = Math.min(md.segmentSizeInBytes(), pos + range) - 1;
                    long begin = System.nanoTime();
                    try (InputStream in = rsm.fetchLogSegment(md, pos, last)) {
                        opening += System.nanoTime() - begin;
                        for (int n; (n = in.read(buf, 0, buf.length)) >= 0; ) {
                            total += n;
                        }
                    }
                }
                cpu = ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime() - cpu;
                return "{\"cmd\":\"ranges\",\"bytes\":" + total + ",\"open_ns\":" + opening
                        + ",\"cpu_ns\":" + cpu + "}";
            }
            case "index": {
                byte[] bytes;
                try (InputStream in = rsm.fetchIndex(metadata(kv), IndexType.valueOf(kv.get("type")))) {
                    bytes = in.readAllBytes();
                }
                Files.write(Paths.get(kv.get("out")), bytes);
                return "{\"cmd\":\"index\",\"bytes\":" + bytes.length + "}";
            }
            case "delete":
                rsm.deleteLogSegmentData(metadata(kv));
                return "{\"cmd\":\"delete\"}";
            case "parallel":
                return parallel(rsm, metadata(kv), Integer.parseInt(kv.get("threads")),
                        Integer.parseInt(kv.get("rounds")));
            case "jmx":
                return jmx();
            default:
                throw new IllegalArgumentException("unknown command " + verb);
        }
    }

    /** Each thread reads the whole segment `rounds` times: overlap = sum of call times / wall. */
    private static String parallel(EngineRemoteStorageManager rsm, RemoteLogSegmentMetadata md,
                                   int threads, int rounds) throws Exception {
        AtomicLong busy = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        List<Exception> failures = new ArrayList<>();
        List<Thread> workers = new ArrayList<>();
        long begin = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            Thread worker = new Thread(() -> {
                byte[] buf = new byte[1 << 20];
                for (int r = 0; r < rounds; r++) {
                    long s = System.nanoTime();
                    try (InputStream in = rsm.fetchLogSegment(md, 0)) {
                        for (int n; (n = in.read(buf, 0, buf.length)) >= 0; ) {
                            bytes.addAndGet(n);
                        }
                    } catch (Exception e) {
                        synchronized (failures) {
                            failures.add(e);
                        }
                    }
                    busy.addAndGet(System.nanoTime() - s);
                }
            });
            workers.add(worker);
            worker.start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        long wall = System.nanoTime() - begin;
        if (!failures.isEmpty()) {
            throw failures.get(0);
        }
        // direct memory the JVM holds now: the plugin's pooled stream buffers, if it uses any
        long direct = ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class).stream()
                .filter(pool -> pool.getName().equals("direct"))
                .mapToLong(BufferPoolMXBean::getMemoryUsed).sum();
        return "{\"cmd\":\"parallel\",\"wall_ns\":" + wall + ",\"busy_ns\":" + busy.get()
                + ",\"bytes\":" + bytes.get() + ",\"direct\":" + direct + "}";
    }

    private static String jmx() throws Exception {
        Thread.sleep(1100);  // past the beans' one-second snapshot
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        // a first read refreshes the snapshot, which registers the beans that appeared since
        // (a JMX poller sees them on its next scrape)
        for (ObjectName name : server.queryNames(
                new ObjectName("aiven.kafka.server.tieredstorage*:*"), null)) {
            server.getMBeanInfo(name);
        }
        StringBuilder out = new StringBuilder("{\"cmd\":\"jmx\",\"beans\":{");
        boolean first = true;
        for (ObjectName name : new java.util.TreeSet<>(server.queryNames(
                new ObjectName("aiven.kafka.server.tieredstorage*:*"), null))) {
            Map<String, Object> attrs = new LinkedHashMap<>();
            for (MBeanAttributeInfo info : server.getMBeanInfo(name).getAttributes()) {
                attrs.put(info.getName(), server.getAttribute(name, info.getName()));
            }
            out.append(first ? "" : ",").append(quote(name.toString())).append(":{");
            first = false;
            boolean firstAttr = true;
            for (Map.Entry<String, Object> e : attrs.entrySet()) {
                out.append(firstAttr ? "" : ",").append(quote(e.getKey())).append(':')
                        .append(e.getValue());
                firstAttr = false;
            }
            out.append('}');
        }
        return out.append("}}").toString();
    }

    private static RemoteLogSegmentMetadata metadata(Map<String, String> kv) {
        TopicIdPartition tip = new TopicIdPartition(Uuid.fromString(kv.get("topicId")),
                new TopicPartition(kv.get("topic"), Integer.parseInt(kv.get("partition"))));
        Map<Integer, Long> epochs = new TreeMap<>();
        for (String pair : kv.getOrDefault("epochs", "0:" + kv.get("start")).split(",")) {
            String[] eo = pair.split(":");
            epochs.put(Integer.parseInt(eo[0]), Long.parseLong(eo[1]));
        }
        Optional<CustomMetadata> custom = Optional.ofNullable(kv.get("custom"))
                .map(h -> new CustomMetadata(HexFormat.of().parseHex(h)));
        return new RemoteLogSegmentMetadata(
                new RemoteLogSegmentId(tip, Uuid.fromString(kv.get("segmentId"))),
                Long.parseLong(kv.get("start")), Long.parseLong(kv.get("end")),
                Long.parseLong(kv.getOrDefault("maxTs", "0")), 0, 0L,
                Integer.parseInt(kv.get("size")), custom,
                RemoteLogSegmentState.valueOf(kv.getOrDefault("state", "COPY_SEGMENT_FINISHED")),
                epochs);
    }

    private static String error(String verb, Exception e) {
        return "{\"cmd\":" + quote(verb) + ",\"error\":" + quote(e.getClass().getSimpleName())
                + ",\"message\":" + quote(String.valueOf(e.getMessage())) + "}";
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
