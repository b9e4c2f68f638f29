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

    /**
     * jep words a Python exception as {@code <class 'module.Name'>: message}. The bridge
     * raises the engine's errors only: engine.errors.RemoteResourceNotFoundError is Kafka's
     * not-found, engine.errors.ConfigError a bad setting, any other a storage failure (named
     * by its class when it is not the plain RemoteStorageError).
     */
    static EngineException of(JepException e) {
        String text = String.valueOf(e.getMessage());
        String prefix = "<class '";
        int end = text.startsWith(prefix) ? text.indexOf("'>", prefix.length()) : -1;
        if (end < 0) {
            return new EngineException(Kind.STORAGE, text);
        }
        String name = text.substring(prefix.length(), end);
        String message = text.substring(end + 2).replaceFirst("^:\\s*", "");
        switch (name) {
            case "engine.errors.RemoteResourceNotFoundError":
                return new EngineException(Kind.NOT_FOUND, message);
            case "engine.errors.ConfigError":
                return new EngineException(Kind.CONFIG, message);
            case "engine.errors.RemoteStorageError":
                return new EngineException(Kind.STORAGE, message);
            default:
                return new EngineException(Kind.STORAGE,
                        name.substring(name.lastIndexOf('.') + 1) + ": " + message);
        }
    }
}
