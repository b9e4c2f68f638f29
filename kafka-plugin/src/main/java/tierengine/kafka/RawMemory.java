package tierengine.kafka;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Field;

/**
 * Copies from memory the engine pinned (a chunk in its cache, a mapped file) straight into a
 * Java array: {@code sun.misc.Unsafe.copyMemory} (the jdk.unsupported module every JDK
 * since 9 ships), found reflectively. Where it is missing, or the system property
 * {@value #PROPERTY} is {@code false}, streams copy through a direct buffer instead, one copy
 * more.
 */
final class RawMemory {
    /** Set to {@code false} to keep the plugin from copying out of native memory. */
    static final String PROPERTY = "tierengine.kafka.rawCopy";

    /** (Object, long, Object, long, long) void, bound to the Unsafe instance; or null. */
    private static final MethodHandle COPY;
    private static final long BYTE_BASE;

    static {
        MethodHandle copy = null;
        long base = 0;
        if (!"false".equalsIgnoreCase(System.getProperty(PROPERTY))) {
            try {
                Class<?> unsafeClass = Class.forName("sun.misc.Unsafe");
                Field field = unsafeClass.getDeclaredField("theUnsafe");
                field.setAccessible(true);
                Object unsafe = field.get(null);
                MethodHandles.Lookup lookup = MethodHandles.lookup();
                copy = lookup.findVirtual(unsafeClass, "copyMemory", MethodType.methodType(
                        void.class, Object.class, long.class, Object.class, long.class,
                        long.class)).bindTo(unsafe);
                base = ((Number) lookup.findVirtual(unsafeClass, "arrayBaseOffset",
                        MethodType.methodType(int.class, Class.class)).bindTo(unsafe)
                        .invoke(byte[].class)).longValue();
            } catch (Throwable e) {  // absent or closed in this JDK: the direct-buffer path
                copy = null;
            }
        }
        COPY = copy;
        BYTE_BASE = base;
    }

    private RawMemory() {
    }

    static boolean available() {
        return COPY != null;
    }

    /** Copies {@code n} bytes at native {@code address} into {@code b[off, off + n)}. */
    static void copy(long address, byte[] b, int off, int n) {
        try {
            COPY.invokeExact((Object) null, address, (Object) b, BYTE_BASE + off, (long) n);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {  // copyMemory declares none
            throw new IllegalStateException(e);
        }
    }
}
