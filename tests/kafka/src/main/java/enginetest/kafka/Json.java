package enginetest.kafka;

import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.Map;

/** One JSON object per output line: strings, numbers, booleans, null, nested maps and
 *  lists; byte arrays as base64 (null stays null). Lines are buffered (a flush per line
 *  would cost a write per record): callers flush after each batch, Main before exiting. */
final class Json {
    private static final PrintStream OUT = new PrintStream(
            new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16),
            false, StandardCharsets.UTF_8);

    private final Map<String, Object> fields = new LinkedHashMap<>();

    static Json of(String type) {
        return new Json().put("type", type);
    }

    Json put(String name, Object value) {
        fields.put(name, value);
        return this;
    }

    static String base64(byte[] bytes) {
        return bytes == null ? null : Base64.getEncoder().encodeToString(bytes);
    }

    void print() {
        StringBuilder out = new StringBuilder();
        write(out, fields);
        OUT.println(out);
    }

    static void flush() {
        OUT.flush();
    }

    private static void write(StringBuilder out, Object v) {
        if (v == null) {
            out.append("null");
        } else if (v instanceof Json) {
            write(out, ((Json) v).fields);
        } else if (v instanceof String) {
            string(out, (String) v);
        } else if (v instanceof Number || v instanceof Boolean) {
            out.append(v);
        } else if (v instanceof byte[]) {
            string(out, base64((byte[]) v));
        } else if (v instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                out.append(first ? "" : ",");
                first = false;
                string(out, String.valueOf(e.getKey()));
                out.append(':');
                write(out, e.getValue());
            }
            out.append('}');
        } else if (v instanceof Collection) {
            out.append('[');
            boolean first = true;
            for (Object item : (Collection<?>) v) {
                out.append(first ? "" : ",");
                first = false;
                write(out, item);
            }
            out.append(']');
        } else {
            string(out, v.toString());
        }
    }

    private static void string(StringBuilder out, String s) {
        if (s == null) {
            out.append("null");
            return;
        }
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        out.append('"');
    }
}
