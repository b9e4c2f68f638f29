package tierengine.kafka;

import java.io.IOException;
import java.io.InputStream;
import java.lang.ref.Cleaner;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

import jep.DirectNDArray;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * A segment's {@code .log} bytes [start, end), pulled lazily from the engine a range at a
 * time, never the whole segment. The engine maps each range ({@code plugin_map}: a view of
 * its chunk cache's memory or of the mapped file, pinned until the stream moves on or
 * closes) and {@code read} copies from it straight into the caller's array: one copy per
 * fetched range (a closed stream's pin goes with the next map of any stream). Where
 * {@link RawMemory} is unavailable, the engine writes each range into a
 * pooled direct buffer instead ({@code plugin_read_into}) and {@code read} copies from that.
 * A mapped range costs the same whatever its length (a view, nothing copied until read), so
 * a mapped stream asks for 2 MiB (or what its reader asks for, if more) from where it is, and
 * the engine maps as much of that as one view holds (to its chunk's end, never a join of
 * chunks). Kafka's reader starts at its offset index's position, up to an index interval
 * (4 KiB by default) before the batch it wants, skips to that batch and reads up to its fetch
 * size (1 MiB by default) from it: it maps once per fetch, twice where the fetch crosses a
 * chunk boundary. On the direct-buffer path, where each range is copied in full, a stream
 * with no end position (Kafka's reader asks for one from a position on) starts with a small
 * range and doubles it, so a reader that wants one batch pays for little more, and a reader
 * walking on is served in 1 MiB ranges; a bounded stream reads its range (up to 1 MiB) at
 * once.
 * Safe to close from another thread than the reader's.
 */
final class SegmentInputStream extends InputStream {
    static final int FIRST_RANGE = 64 * 1024;
    static final int MAX_RANGE = 1024 * 1024;
    /** What a mapped stream asks for (a fetch of 1 MiB and the batches before it). */
    static final int MAPPED_RANGE = 2 * MAX_RANGE;
    /** The most a mapped stream asks for at once (a reader's own ask above that). */
    static final int MAX_MAPPED = 16 * MAX_RANGE;
    /** Direct buffers kept for the next streams (at most this many MiB stay allocated). */
    private static final ArrayBlockingQueue<Buffer> POOL = new ArrayBlockingQueue<>(64);
    /** Releases the pin of a stream dropped without close. */
    private static final Cleaner CLEANER = Cleaner.create();

    /** A direct buffer and the numpy view jep hands the engine. */
    private static final class Buffer {
        final ByteBuffer bytes = ByteBuffer.allocateDirect(MAX_RANGE);
        final DirectNDArray<ByteBuffer> array = new DirectNDArray<>(bytes, true);
    }

    /**
     * Pins of closed streams, released by the next {@code plugin_map} of any stream (one
     * crossing fewer per stream); past this many, a close releases its pin itself.
     */
    private static final int CLOSED_PINS_KEPT = 64;
    private static final ConcurrentLinkedQueue<Long> CLOSED_PINS = new ConcurrentLinkedQueue<>();
    private static final AtomicInteger CLOSED_PIN_COUNT = new AtomicInteger();

    /** The engine's pin on the mapped view being read (0: none). */
    private static final class Pin implements Runnable {
        private final EngineRemoteStorageManager rsm;
        private long id;

        Pin(EngineRemoteStorageManager rsm) {
            this.rsm = rsm;
        }

        /** At close, or by the cleaner for a stream dropped unclosed. */
        @Override
        public synchronized void run() {
            long held = id;
            id = 0;
            if (held == 0) {
                return;
            }
            if (CLOSED_PIN_COUNT.incrementAndGet() <= CLOSED_PINS_KEPT) {
                CLOSED_PINS.add(held);
                return;
            }
            CLOSED_PIN_COUNT.decrementAndGet();
            unmap(rsm, held);
        }
    }

    private static void unmap(EngineRemoteStorageManager rsm, long pin) {
        try {
            rsm.call("plugin_unmap", pin);
        } catch (RemoteStorageException | RuntimeException e) {
            // the tier is gone, and its pins with it
        }
    }

    private static long takeClosedPin() {
        Long pin = CLOSED_PINS.poll();
        if (pin == null) {
            return 0;
        }
        CLOSED_PIN_COUNT.decrementAndGet();
        return pin;
    }

    /** Releases the pins closed streams left for the next map (the plugin is closing). */
    static void releaseClosedPins(EngineRemoteStorageManager rsm) {
        for (long pin; (pin = takeClosedPin()) != 0; ) {
            unmap(rsm, pin);
        }
    }

    private final EngineRemoteStorageManager rsm;
    private final String segment;
    private final long end;
    private long position;
    private int nextRange;
    private boolean first = true;
    private boolean closed;
    /** Mapped path: the pin, its cleaner registration and the view's address and bounds. */
    private final Pin pin;
    private final Cleaner.Cleanable cleanable;
    private long address;
    private int offset;
    private int limit;
    /** Direct-buffer path. */
    private Buffer buffer;

    SegmentInputStream(EngineRemoteStorageManager rsm, String segment, long start,
                       long end, boolean bounded) {
        this.rsm = rsm;
        this.segment = segment;
        this.position = start;
        this.end = end;
        this.nextRange = bounded || RawMemory.available() ? MAX_RANGE : FIRST_RANGE;
        if (RawMemory.available()) {
            pin = new Pin(rsm);
            cleanable = CLEANER.register(this, pin);
        } else {
            pin = null;
            cleanable = null;
        }
    }

    @Override
    public int read() throws IOException {
        byte[] one = new byte[1];
        return read(one, 0, 1) < 0 ? -1 : one[0] & 0xFF;
    }

    @Override
    public synchronized int read(byte[] b, int off, int len) throws IOException {
        if (closed) {
            throw new IOException("stream closed");
        }
        if (off < 0 || len < 0 || len > b.length - off) {
            throw new IndexOutOfBoundsException();
        }
        if (len == 0) {
            return 0;
        }
        if (remaining() == 0) {
            if (position >= end) {
                return -1;
            }
            try {
                fill(len);
            } catch (RemoteStorageException e) {
                throw new IOException(e.getMessage(), e);
            }
        }
        int n = Math.min(len, remaining());
        if (pin != null) {
            RawMemory.copy(address + offset, b, off, n);
            offset += n;
        } else {
            buffer.bytes.get(b, off, n);
        }
        return n;
    }

    private int remaining() {
        if (pin != null) {
            return limit - offset;
        }
        return buffer == null ? 0 : buffer.bytes.remaining();
    }

    /**
     * Reads the first range now, so that a segment that cannot be read fails
     * fetchLogSegment itself (RemoteResourceNotFoundException for one that is gone).
     */
    synchronized void start() throws RemoteStorageException {
        if (position < end) {
            fill(nextRange);
        }
    }

    private void fill(int wanted) throws RemoteStorageException {
        if (pin != null) {
            map((int) Math.min(end - position,
                               Math.min(MAX_MAPPED, Math.max(MAPPED_RANGE, wanted))));
        } else {
            readInto((int) (Math.min(end, position + Math.min(MAX_RANGE,
                                                              Math.max(nextRange, wanted)))
                            - position));
        }
        first = false;
        nextRange = Math.min(MAX_RANGE, nextRange * 2);
    }

    private void map(int n) throws RemoteStorageException {
        long release;
        synchronized (pin) {
            release = pin.id;
            pin.id = 0;
        }
        offset = 0;
        limit = 0;
        // (address, length, pin): the engine pinned that many bytes there, 0 < length <= n
        List<?> mapped = (List<?>) rsm.call("plugin_map", rsm.handle(), segment, position, n,
                first, release, takeClosedPin());
        long at = ((Number) mapped.get(0)).longValue();
        int length = ((Number) mapped.get(1)).intValue();
        synchronized (pin) {
            pin.id = ((Number) mapped.get(2)).longValue();
        }
        if (length <= 0 || length > n) {
            throw new RemoteStorageException(segment + ": the engine mapped " + length
                    + " bytes at " + position + ", at most " + n + " asked");
        }
        address = at;
        limit = length;
        position += length;
    }

    private void readInto(int n) throws RemoteStorageException {
        if (buffer == null) {
            buffer = POOL.poll();
            if (buffer == null) {
                buffer = new Buffer();
            }
        }
        buffer.bytes.clear();
        try {
            rsm.call("plugin_read_into", rsm.handle(), segment, position, buffer.array, n, first);
        } catch (RemoteStorageException e) {
            buffer.bytes.limit(0);
            throw e;
        }
        buffer.bytes.limit(n);
        position += n;
    }

    @Override
    public synchronized long skip(long n) {
        if (n <= 0 || closed) {
            return 0;
        }
        int inRange = (int) Math.min(n, remaining());
        if (pin != null) {
            offset += inRange;
        } else if (inRange > 0) {
            buffer.bytes.position(buffer.bytes.position() + inRange);
        }
        long more = Math.min(n - inRange, end - position);
        position += more;
        return inRange + more;
    }

    @Override
    public synchronized int available() {
        return closed ? 0 : remaining();
    }

    @Override
    public synchronized void close() {
        if (!closed) {
            closed = true;
            if (cleanable != null) {
                offset = 0;
                limit = 0;
                cleanable.clean();
            }
            if (buffer != null) {
                POOL.offer(buffer);
                buffer = null;
            }
        }
    }
}
