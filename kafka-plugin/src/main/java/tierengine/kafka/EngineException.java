package tierengine.kafka;

import jep.JepException;

/** An error the engine raised through the bridge, by the bridge's three kinds. */
final class EngineException extends Exception {
    private static final long serialVersionUID = 1L;

    enum Kind { NOT_FOUND, CONFIG, STORAGE }

    private final Kind kind;

    EngineException(Kind kind, String message) {
        super(message);
        this.kind = kind;
    }

    Kind kind() {
        return kind;
    }

    /** jep words a Python exception as {@code <class 'module.Name'>: message}. */
    static EngineException of(JepException e) {
        String text = String.valueOf(e.getMessage());
        String prefix = "<class '" + EngineRuntime.BRIDGE + ".";
        Kind kind = Kind.STORAGE;
        String message = text;
        if (text.startsWith(prefix)) {
            int end = text.indexOf("'>", prefix.length());
            String name = end < 0 ? "" : text.substring(prefix.length(), end);
            message = end < 0 ? text : text.substring(end + 2).replaceFirst("^:\\s*", "");
            if (name.equals("PluginResourceNotFound")) {
                kind = Kind.NOT_FOUND;
            } else if (name.equals("PluginConfigError")) {
                kind = Kind.CONFIG;
            }
        }
        return new EngineException(kind, message);
    }
}
