package tierengine.kafka;

/** The plugin cannot start: the message names the configuration key and the path. */
final class PluginConfigException extends Exception {
    private static final long serialVersionUID = 1L;

    PluginConfigException(String message) {
        super(message);
    }
}
