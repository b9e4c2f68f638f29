package enginetest.kafka;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/** `--name value` options (repeatable) and bare `--flag`s; an option a command does not
 *  know is an error, so a mistyped name never silently falls back to a default. */
final class Args {
    private final Map<String, List<String>> values = new HashMap<>();

    Args(String[] argv, int from, Set<String> options, Set<String> flags) {
        for (int i = from; i < argv.length; i++) {
            String arg = argv[i];
            if (!arg.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + arg);
            }
            String name = arg.substring(2);
            if (flags.contains(name)) {
                values.computeIfAbsent(name, k -> new ArrayList<>()).add("true");
            } else if (options.contains(name)) {
                if (i + 1 >= argv.length) {
                    throw new IllegalArgumentException(arg + " needs a value");
                }
                values.computeIfAbsent(name, k -> new ArrayList<>()).add(argv[++i]);
            } else {
                throw new IllegalArgumentException("unknown option " + arg);
            }
        }
    }

    boolean has(String name) {
        return values.containsKey(name);
    }

    String get(String name) {
        List<String> v = values.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v.get(v.size() - 1);
    }

    String get(String name, String fallback) {
        return has(name) ? get(name) : fallback;
    }

    int getInt(String name, int fallback) {
        return has(name) ? Integer.parseInt(get(name)) : fallback;
    }

    long getLong(String name, long fallback) {
        return has(name) ? Long.parseLong(get(name)) : fallback;
    }

    List<String> getAll(String name) {
        return values.getOrDefault(name, List.of());
    }

    /** Repeated `--name k=v` options as a map (insertion order). */
    Map<String, String> pairs(String name) {
        Map<String, String> out = new LinkedHashMap<>();
        for (String kv : getAll(name)) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("--" + name + " wants key=value, got " + kv);
            }
            out.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        return out;
    }

    /** Comma-separated integers, e.g. `--partitions 0,2`. */
    List<Integer> ints(String name) {
        List<Integer> out = new ArrayList<>();
        for (String s : get(name).split(",")) {
            out.add(Integer.parseInt(s.trim()));
        }
        return out;
    }
}
