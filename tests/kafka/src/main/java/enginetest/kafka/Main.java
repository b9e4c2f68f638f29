package enginetest.kafka;

import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

/** A small Kafka client the tests drive: one subcommand per call, one JSON object per
 *  stdout line; any failure goes to stderr with exit status 1 (2 for bad arguments).
 *  <pre>
 *  produce | consume | offsets-for-times | list-offsets | delete-records | create-topic |
 *  alter-config | describe-topic | delete-topic | add-partitions | reassign
 *  --bootstrap host:port
 *  [options]
 *  </pre>
 *  Every subcommand takes `--property k=v` (repeatable) for extra client configs. */
public final class Main {
    private Main() {
    }

    public static void main(String[] argv) {
        if (argv.length == 0) {
            System.err.println("usage: <subcommand> --bootstrap host:port [options]");
            System.exit(2);
        }
        int status = 0;
        try {
            run(argv[0], argv);
        } catch (IllegalArgumentException e) {
            System.err.println("error: " + e.getMessage());
            status = 2;
        } catch (Throwable e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null
                    ? e.getCause() : e;
            System.err.println("error: " + cause.getClass().getName() + ": " + cause.getMessage());
            cause.printStackTrace(System.err);
            status = 1;
        }
        Json.flush();  // what was printed before a failure is kept
        System.exit(status);  // the client threads of a failed close must not keep the JVM up
    }

    private static void run(String command, String[] argv) throws Exception {
        switch (command) {
            case "produce":
                Produce.run(argv);
                break;
            case "consume":
                Consume.run(argv);
                break;
            case "offsets-for-times":
                Consume.offsetsForTimes(argv);
                break;
            case "list-offsets":
            case "delete-records":
            case "create-topic":
            case "alter-config":
            case "describe-topic":
            case "delete-topic":
            case "add-partitions":
            case "reassign":
                AdminCommands.run(command, argv);
                break;
            default:
                throw new IllegalArgumentException("unknown subcommand " + command + " (argv "
                        + Arrays.toString(argv) + ")");
        }
    }

    /** `--bootstrap` and every `--property k=v`. */
    static Properties clientProperties(Args args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args.get("bootstrap"));
        props.putAll(args.pairs("property"));
        return props;
    }
}
