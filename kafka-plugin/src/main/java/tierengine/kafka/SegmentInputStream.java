package tierengine.kafka;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.concurrent.ArrayBlockingQueue;

import jep.DirectNDArray;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * A segment's {@code .log} bytes [start, end), pulled lazily from the engine a range at a
 * time into a direct buffer the engine writes straight into (its chunk cache, coalesced GETs
 * and read-ahead serve the range): one copy per fetched range, never the whole segment.
 * A stream with no end position (Kafka's reader asks for one from a position on) starts with a
 * small range and doubles it, so a reader that wants one batch pays for little more, and a
 * reader walking on is served in 1 MiB ranges; a bounded stream reads its range (up to 1 MiB)
 * at once.
 */
final class SegmentInputStream extends InputStream {
    static final int FIRST_RANGE = 64 * 1024;
    static final int MAX_RANGE = 1024 * 1024;
    /** Direct buffers kept for the next streams (at most this many MiB stay allocated). */
    private static final ArrayBlockingQueue<Buffer> POOL = new ArrayBlockingQueue<>(64);

    /** A direct buffer and the numpy view jep hands the engine. */
    private static final class Buffer {
        final ByteBuffer bytes = ByteBuffer.allocateDirect(MAX_RANGE);
        final DirectNDArray<ByteBuffer> array = new DirectNDArray<>(bytes, true);
    }

    private final EngineRemoteStorageManager rsm;
    private final String segment;
    private final long end;
    private long position;
    private int nextRange;
    private boolean first = true;
    private Buffer buffer;
    private boolean closed;

    SegmentInputStream(EngineRemoteStorageManager rsm, String segment, long start,
                       long end, boolean bounded) {
        this.rsm = rsm;
        this.segment = segment;
        this.position = start;
        this.end = end;
        this.nextRange = bounded ? MAX_RANGE : FIRST_RANGE;
    }

    @Override
    public int read() throws IOException {
        byte[] one = new byte[1];
        return read(one, 0, 1) < 0 ? -1 : one[0] & 0xFF;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
        if (closed) {
            throw new IOException("stream closed");
        }
        if (off < 0 || len < 0 || len > b.length - off) {
            throw new IndexOutOfBoundsException();
        }
        if (len == 0) {
            return 0;
        }
        if (buffer == null || !buffer.bytes.hasRemaining()) {
            if (position >= end) {
                return -1;
            }
            try {
                fill(len);
            } catch (RemoteStorageException e) {
                throw new IOException(e.getMessage(), e);
            }
        }
        int n = Math.min(len, buffer.bytes.remaining());
        buffer.bytes.get(b, off, n);
        return n;
    }

    /**
     * Reads the first range now, so that a segment that cannot be read fails
     * fetchLogSegment itself (RemoteResourceNotFoundException for one that is gone).
     */
    void start() throws RemoteStorageException {
        if (position < end) {
            fill(nextRange);
        }
    }

    private void fill(int wanted) throws RemoteStorageException {
        if (buffer == null) {
            buffer = POOL.poll();
            if (buffer == null) {
                buffer = new Buffer();
            }
        }
        int n = (int) Math.min(end - position, Math.min(MAX_RANGE, Math.max(nextRange, wanted)));
        buffer.bytes.clear();
        try {
            rsm.call("plugin_read_into", rsm.handle(), segment, position, buffer.array, n, first);
            first = false;
        } catch (RemoteStorageException e) {
            buffer.bytes.limit(0);
            throw e;
        }
        buffer.bytes.limit(n);
        position += n;
        nextRange = Math.min(MAX_RANGE, nextRange * 2);
    }

    @Override
    public long skip(long n) {
        if (n <= 0 || closed) {
            return 0;
        }
        long skipped = 0;
        if (buffer != null && buffer.bytes.hasRemaining()) {
            int inBuffer = (int) Math.min(n, buffer.bytes.remaining());
            buffer.bytes.position(buffer.bytes.position() + inBuffer);
            skipped = inBuffer;
        }
        long more = Math.min(n - skipped, end - position);
        position += more;
        return skipped + more;
    }

    @Override
    public int available() {
        return buffer == null || closed ? 0 : buffer.bytes.remaining();
    }

    @Override
    public void close() {
        if (!closed) {
            closed = true;
            if (buffer != null) {
                POOL.offer(buffer);
                buffer = null;
            }
        }
    }
}
