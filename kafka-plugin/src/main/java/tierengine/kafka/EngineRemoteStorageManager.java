package tierengine.kafka;

import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.net.URISyntaxException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.StringJoiner;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

/**
 * Kafka's RemoteStorageManager over the engine, in this broker's process: every call goes to
 * {@code engine.remote.broker_plugin} through jep, and every decision (layout, chunks,
 * transforms, caches, read-ahead, retries) is the engine's. Configured with the Aiven plugin's
 * {@code rsm.config.*} keys (the same bucket and format), plus {@value #VENV_KEY}, the venv the
 * engine is installed in (by default the venv holding this jar, where scripts/setup.sh puts
 * it).
 *
 * <p>Thread-safe: Kafka's copier, expiration and reader threads call one instance at once.
 */
public class EngineRemoteStorageManager implements RemoteStorageManager {
    /** The key naming the engine's venv (without Kafka's {@code rsm.config.} prefix). */
    public static final String VENV_KEY = "engine.venv";
    static final String PREFIX = "rsm.config.";

    /** Descriptions of recently described metadata objects, by identity (see words()). */
    private static final int DESCRIBED_SLOTS = 64;

    private final Described[] described = new Described[DESCRIBED_SLOTS];
    private volatile EngineRuntime runtime;
    private volatile long handle;
    private volatile EngineLog log;
    private volatile EngineMetrics metrics;

    @Override
    public void configure(Map<String, ?> configs) {
        Path venv = venv(configs.get(VENV_KEY));
        List<String> settings = new ArrayList<>();
        for (Map.Entry<String, ?> e : configs.entrySet()) {
            if (!e.getKey().equals(VENV_KEY) && e.getValue() != null) {
                settings.add(e.getKey());
                settings.add(String.valueOf(e.getValue()));
            }
        }
        try {
            runtime = EngineRuntime.start(venv, PREFIX + VENV_KEY);
        } catch (PluginConfigException e) {
            throw new ConfigException(e.getMessage());
        }
        log = new EngineLog(runtime);
        try {
            handle = ((Number) runtime.call("plugin_open", settings)).longValue();
        } catch (EngineException e) {
            throw new ConfigException(e.getMessage());
        } finally {
            log.drain();
        }
        metrics = EngineMetrics.register(runtime, handle, log);
    }

    /** The venv: the key's value, else the venv this jar lies in. */
    private static Path venv(Object configured) {
        if (configured != null && !String.valueOf(configured).isBlank()) {
            return Paths.get(String.valueOf(configured).trim()).toAbsolutePath().normalize();
        }
        Path jar;
        try {
            jar = Paths.get(EngineRemoteStorageManager.class.getProtectionDomain()
                    .getCodeSource().getLocation().toURI());
        } catch (URISyntaxException | SecurityException | NullPointerException e) {
            throw new ConfigException(PREFIX + VENV_KEY + " is not set and the plugin jar's "
                    + "location is unknown: " + e);
        }
        for (Path dir = jar.getParent(); dir != null; dir = dir.getParent()) {
            if (Files.isRegularFile(dir.resolve("pyvenv.cfg"))) {
                return dir;
            }
        }
        throw new ConfigException(PREFIX + VENV_KEY + " is not set and the plugin jar " + jar
                + " does not lie in a Python venv: set it to the engine's venv");
    }

    private EngineRuntime runtime() throws RemoteStorageException {
        EngineRuntime r = runtime;
        if (r == null) {
            throw new RemoteStorageException("EngineRemoteStorageManager is not configured");
        }
        return r;
    }

    Object call(String function, Object... args) throws RemoteStorageException {
        try {
            return runtime().call(function, args);
        } catch (EngineException e) {
            if (e.kind() == EngineException.Kind.NOT_FOUND) {
                throw new RemoteResourceNotFoundException(e.getMessage());
            }
            throw new RemoteStorageException(e.getMessage());
        } finally {
            EngineLog l = log;
            if (l != null) {
                l.drain();
            }
        }
    }

    long handle() {
        return handle;
    }

    /** A metadata object and its description (immutable: safely shared between threads). */
    private static final class Described {
        final RemoteLogSegmentMetadata metadata;
        final String words;

        Described(RemoteLogSegmentMetadata metadata, String words) {
            this.metadata = metadata;
            this.words = words;
        }
    }

    /**
     * {@link #describe} of {@code m}, kept by identity: Kafka's reader passes the metadata
     * object its metadata cache holds for a segment, once per fetch, and the object is
     * immutable. A slot another thread overwrites only costs a describe more.
     */
    String words(RemoteLogSegmentMetadata m) {
        int slot = System.identityHashCode(m) & (DESCRIBED_SLOTS - 1);
        Described d = described[slot];
        if (d == null || d.metadata != m) {
            d = new Described(m, describe(m));
            described[slot] = d;
        }
        return d.words;
    }

    /**
     * Kafka's segment metadata as one line of words (broker_plugin._segment_metadata reads
     * it): one string crosses into Python per call, and the engine keeps the parsed metadata
     * by that string. Topic names hold no spaces (Kafka's legal characters).
     */
    static String describe(RemoteLogSegmentMetadata m) {
        TopicIdPartition tip = m.remoteLogSegmentId().topicIdPartition();
        StringJoiner epochs = new StringJoiner(",");
        for (Map.Entry<Integer, Long> e : m.segmentLeaderEpochs().entrySet()) {
            epochs.add(e.getKey() + ":" + e.getValue());
        }
        String custom = m.customMetadata().map(c -> HexFormat.of().formatHex(c.value()))
                .orElse("-");
        return String.join(" ", tip.topicId().toString(), tip.topic(),
                Integer.toString(tip.partition()), m.remoteLogSegmentId().id().toString(),
                Long.toString(m.startOffset()), Long.toString(m.endOffset()),
                Long.toString(m.maxTimestampMs()), Integer.toString(m.brokerId()),
                Long.toString(m.eventTimestampMs()), Integer.toString(m.segmentSizeInBytes()),
                Integer.toString(m.state().id()), Boolean.toString(m.isTxnIdxEmpty()),
                epochs.toString(), custom);
    }

    @Override
    public Optional<CustomMetadata> copyLogSegmentData(RemoteLogSegmentMetadata metadata,
                                                       LogSegmentData data)
            throws RemoteStorageException {
        ByteBuffer epochs = data.leaderEpochIndex().duplicate();
        byte[] epochBytes = new byte[epochs.remaining()];
        epochs.get(epochBytes);
        Object custom = call("plugin_copy", handle, describe(metadata),
                data.logSegment().toString(), data.offsetIndex().toString(),
                data.timeIndex().toString(),
                data.transactionIndex().map(Path::toString).orElse(null),
                data.producerSnapshotIndex().toString(), epochBytes);
        return custom == null ? Optional.empty() : Optional.of(new CustomMetadata((byte[]) custom));
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition)
            throws RemoteStorageException {
        return open(metadata, startPosition, metadata.segmentSizeInBytes() - 1, false);
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition,
                                       int endPosition) throws RemoteStorageException {
        return open(metadata, startPosition, endPosition, true);
    }

    private InputStream open(RemoteLogSegmentMetadata metadata, int startPosition,
                             int endPosition, boolean bounded) throws RemoteStorageException {
        int size = metadata.segmentSizeInBytes();
        if (startPosition < 0 || startPosition > size || endPosition < startPosition - 1) {
            throw new RemoteStorageException("positions [" + startPosition + ", " + endPosition
                    + "] outside " + metadata.remoteLogSegmentId() + " of " + size + " bytes");
        }
        SegmentInputStream stream = new SegmentInputStream(this, words(metadata), startPosition,
                Math.min((long) endPosition + 1, size), bounded);
        try {
            stream.start();
        } catch (RemoteStorageException e) {
            stream.close();
            throw e;
        }
        return stream;
    }

    @Override
    public InputStream fetchIndex(RemoteLogSegmentMetadata metadata, IndexType indexType)
            throws RemoteStorageException {
        byte[] bytes = (byte[]) call("plugin_fetch_index", handle, words(metadata),
                indexType.name());
        return new ByteArrayInputStream(bytes);
    }

    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata)
            throws RemoteStorageException {
        call("plugin_delete", handle, describe(metadata));
    }

    @Override
    public void close() {
        EngineMetrics m = metrics;
        metrics = null;
        if (m != null) {
            m.unregister();
        }
        EngineRuntime r = runtime;
        if (r != null && handle != 0) {
            SegmentInputStream.releaseClosedPins(this);
            try {
                r.call("plugin_close", handle);
            } catch (EngineException e) {
                if (log != null) {
                    log.warn("close of the remote storage manager failed: " + e.getMessage());
                }
            }
            handle = 0;
            if (log != null) {
                log.drain();
            }
        }
    }
}
