package tierengine.kafka;

import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The engine's log records, moved into the broker's log (slf4j, under the engine's logger
 * names). The engine queues them (its own threads never call into the JVM); a bridge call
 * drains the queue at most twice a second.
 */
final class EngineLog {
    private static final Logger LOG = LoggerFactory.getLogger(EngineRemoteStorageManager.class);
    private static final long INTERVAL_NANOS = 500_000_000L;

    private final EngineRuntime runtime;
    private final AtomicLong lastDrain = new AtomicLong(System.nanoTime() - INTERVAL_NANOS);

    EngineLog(EngineRuntime runtime) {
        this.runtime = runtime;
    }

    void warn(String message) {
        LOG.warn(message);
    }

    /** Drains the queue unless another call did so less than the interval ago. */
    void drain() {
        long last = lastDrain.get();
        long now = System.nanoTime();
        if (now - last < INTERVAL_NANOS || !lastDrain.compareAndSet(last, now)) {
            return;
        }
        drainNow();
    }

    void drainNow() {
        Object records;
        try {
            records = runtime.call("plugin_drain_log");
        } catch (EngineException e) {
            LOG.warn("the engine's log records could not be read: {}", e.getMessage());
            return;
        }
        for (Object item : (List<?>) records) {
            List<?> record = (List<?>) item;
            int level = ((Number) record.get(0)).intValue();
            Logger logger = LoggerFactory.getLogger(String.valueOf(record.get(1)));
            String message = String.valueOf(record.get(2));
            if (level >= 40) {
                logger.error(message);
            } else if (level >= 30) {
                logger.warn(message);
            } else if (level >= 20) {
                logger.info(message);
            } else {
                logger.debug(message);
            }
        }
    }
}
