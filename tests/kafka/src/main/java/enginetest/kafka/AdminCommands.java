package enginetest.kafka;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

/** The Admin subcommands:
 *  <pre>
 *  list-offsets   --topic T --partitions 0,1 --spec S [--spec S...] [--isolation I]
 *                 S: earliest | latest | max-timestamp | earliest-local | latest-tiered | MS
 *  delete-records --topic T --partitions 0,1 --before-offset O
 *  create-topic   --topic T [--partitions N] [--replication-factor R] [--config k=v...]
 *  alter-config   (--topic T | --broker ID) [--set k=v...] [--delete k...]
 *  add-partitions --topic T --count N          (N: the new total)
 *  describe-topic --topic T
 *  delete-topic   --topic T
 *  reassign       --topic T --partitions P --replicas 2,3   (the new replica list of P)
 *  </pre>
 *  Each waits at most --timeout-ms (default 60000) for the broker's answer. */
final class AdminCommands {
    private static final Set<String> OPTIONS = Set.of("bootstrap", "property", "timeout-ms",
            "topic", "partitions", "spec", "isolation", "before-offset", "replication-factor",
            "config", "broker", "set", "delete", "count", "replicas");

    private AdminCommands() {
    }

    static void run(String command, String[] argv) throws Exception {
        Args args = new Args(argv, 1, OPTIONS, Set.of());
        long timeout = args.getLong("timeout-ms", 60000);
        var props = Main.clientProperties(args);
        props.putIfAbsent("default.api.timeout.ms", String.valueOf(timeout));
        try (Admin admin = Admin.create(props)) {
            switch (command) {
                case "list-offsets":
                    listOffsets(admin, args, timeout);
                    break;
                case "delete-records":
                    deleteRecords(admin, args, timeout);
                    break;
                case "create-topic":
                    createTopic(admin, args, timeout);
                    break;
                case "alter-config":
                    alterConfig(admin, args, timeout);
                    break;
                case "describe-topic":
                    describeTopic(admin, args, timeout);
                    break;
                case "add-partitions":
                    addPartitions(admin, args, timeout);
                    break;
                case "reassign":
                    reassign(admin, args, timeout);
                    break;
                default:
                    admin.deleteTopics(List.of(args.get("topic"))).all()
                            .get(timeout, TimeUnit.MILLISECONDS);
                    Json.of("deleted-topic").put("topic", args.get("topic")).print();
            }
        }
    }

    static OffsetSpec offsetSpec(String spec) {
        switch (spec) {
            case "earliest": return OffsetSpec.earliest();
            case "latest": return OffsetSpec.latest();
            case "max-timestamp": return OffsetSpec.maxTimestamp();
            case "earliest-local": return OffsetSpec.earliestLocal();
            case "latest-tiered": return OffsetSpec.latestTiered();
            default: return OffsetSpec.forTimestamp(Long.parseLong(spec));
        }
    }

    private static List<TopicPartition> partitions(Args args) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p : args.ints("partitions")) {
            tps.add(new TopicPartition(args.get("topic"), p));
        }
        return tps;
    }

    private static void listOffsets(Admin admin, Args args, long timeout) throws Exception {
        var options = new ListOffsetsOptions(
                IsolationLevel.valueOf(args.get("isolation", "read_uncommitted").toUpperCase()));
        for (String spec : args.getAll("spec")) {
            Map<TopicPartition, OffsetSpec> request = new HashMap<>();
            for (TopicPartition tp : partitions(args)) {
                request.put(tp, offsetSpec(spec));
            }
            Map<TopicPartition, ListOffsetsResultInfo> result = admin.listOffsets(request, options)
                    .all().get(timeout, TimeUnit.MILLISECONDS);
            for (TopicPartition tp : partitions(args)) {
                ListOffsetsResultInfo info = result.get(tp);
                Json.of("offset")
                        .put("spec", spec)
                        .put("partition", tp.partition())
                        .put("offset", info.offset())
                        .put("timestamp", info.timestamp())
                        .put("leader_epoch", info.leaderEpoch().orElse(null))
                        .print();
            }
        }
    }

    private static void deleteRecords(Admin admin, Args args, long timeout) throws Exception {
        long before = Long.parseLong(args.get("before-offset"));
        Map<TopicPartition, RecordsToDelete> request = new HashMap<>();
        for (TopicPartition tp : partitions(args)) {
            request.put(tp, RecordsToDelete.beforeOffset(before));
        }
        var result = admin.deleteRecords(request).lowWatermarks();
        for (TopicPartition tp : partitions(args)) {
            Json.of("deleted-records")
                    .put("partition", tp.partition())
                    .put("low_watermark", result.get(tp).get(timeout, TimeUnit.MILLISECONDS)
                            .lowWatermark())
                    .print();
        }
    }

    private static void createTopic(Admin admin, Args args, long timeout) throws Exception {
        String topic = args.get("topic");
        var newTopic = new NewTopic(topic,
                Optional.of(args.getInt("partitions", 1)),
                Optional.of((short) args.getInt("replication-factor", 1)))
                .configs(args.pairs("config"));
        var result = admin.createTopics(List.of(newTopic));
        result.all().get(timeout, TimeUnit.MILLISECONDS);
        Json.of("created-topic")
                .put("topic", topic)
                .put("topic_id", result.topicId(topic).get().toString())
                .print();
    }

    private static void alterConfig(Admin admin, Args args, long timeout) throws Exception {
        ConfigResource resource = args.has("broker")
                ? new ConfigResource(ConfigResource.Type.BROKER, args.get("broker"))
                : new ConfigResource(ConfigResource.Type.TOPIC, args.get("topic"));
        List<AlterConfigOp> ops = new ArrayList<>();
        args.pairs("set").forEach((k, v) -> ops.add(
                new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET)));
        for (String k : args.getAll("delete")) {
            ops.add(new AlterConfigOp(new ConfigEntry(k, null), AlterConfigOp.OpType.DELETE));
        }
        admin.incrementalAlterConfigs(Map.of(resource, ops)).all()
                .get(timeout, TimeUnit.MILLISECONDS);
        Json.of("altered-config").put("resource", resource.name()).print();
    }

    private static void addPartitions(Admin admin, Args args, long timeout) throws Exception {
        String topic = args.get("topic");
        int count = Integer.parseInt(args.get("count"));
        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(count))).all()
                .get(timeout, TimeUnit.MILLISECONDS);
        Json.of("added-partitions").put("topic", topic).put("count", count).print();
    }

    private static void reassign(Admin admin, Args args, long timeout) throws Exception {
        Map<TopicPartition, Optional<NewPartitionReassignment>> moves = new HashMap<>();
        for (TopicPartition tp : partitions(args)) {
            moves.put(tp, Optional.of(new NewPartitionReassignment(args.ints("replicas"))));
        }
        admin.alterPartitionReassignments(moves).all().get(timeout, TimeUnit.MILLISECONDS);
        Json.of("reassigned").put("topic", args.get("topic"))
                .put("replicas", args.ints("replicas")).print();
    }

    private static void describeTopic(Admin admin, Args args, long timeout) throws Exception {
        String topic = args.get("topic");
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                .get(timeout, TimeUnit.MILLISECONDS).get(topic);
        List<Object> partitions = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            partitions.add(Map.of(
                    "partition", p.partition(),
                    "leader", p.leader() == null ? -1 : p.leader().id(),
                    "replicas", ids(p.replicas()),
                    "isr", ids(p.isr())));
        }
        var resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config config = admin.describeConfigs(List.of(resource)).all()
                .get(timeout, TimeUnit.MILLISECONDS).get(resource);
        Map<String, String> configs = new LinkedHashMap<>();
        for (ConfigEntry e : config.entries()) {
            if (e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG) {
                configs.put(e.name(), e.value());
            }
        }
        Json.of("topic")
                .put("topic", topic)
                .put("topic_id", d.topicId().toString())
                .put("partitions", partitions)
                .put("configs", configs)
                .print();
    }

    private static List<Integer> ids(List<Node> nodes) {
        List<Integer> out = new ArrayList<>();
        for (Node n : nodes) {
            out.add(n.id());
        }
        return out;
    }
}
