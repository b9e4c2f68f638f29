# distutils: sources = _native/src/crc32c.c
# cython: language_level=3
"""Checksums and hashes of Kafka's formats over any C-contiguous buffer.

`data` may be bytes, bytearray, memoryview, mmap, a numpy array or anything else exporting a
C-contiguous buffer; it is read in place, never copied. Every function is thread-safe and
releases the GIL for inputs of 4 KiB or more, so threads checksumming large buffers run in
parallel. Non-buffers raise TypeError; non-contiguous buffers raise BufferError (or the
exporter's own error, e.g. numpy's ValueError).

CRC-32C picks its implementation once per process from the CPU (see `crc32c_implementation`);
the environment variable ENGINE_CRC32C_IMPL=<name> forces an available one.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t

from checksums cimport (
    ENG_CRC_IMPL_UNAVAILABLE,
    ENG_CRC_UNKNOWN_IMPL,
    eng_crc32,
    eng_crc32c,
    eng_crc32c_combine,
    eng_crc32c_fold_constants,
    eng_crc32c_impl,
    eng_crc32c_impl_available,
    eng_crc32c_impl_count,
    eng_crc32c_impl_name,
    eng_crc32c_with,
    eng_crc32c_xpow,
    eng_murmur2,
    eng_xxh32,
)
from engine._native.errors cimport raise_status
from status cimport ENG_ERR_ARGUMENT, ENG_ERR_UNAVAILABLE

from engine._native.errors import ImplementationUnavailableError  # re-exported

__all__ = [
    "crc32c", "crc32c_combine", "crc32c_implementation", "crc32c_implementations",
    "crc32c_with", "crc32", "xxh32", "murmur2", "ImplementationUnavailableError",
]

# Inputs at least this long (bytes) are checksummed with the GIL released. Below it the work
# (about 40 ns for 4 KiB on AVX-512) is no more than a release and re-acquire would cost.
cdef Py_ssize_t NOGIL_MIN = 4096


cdef inline bint _get_buffer(object data, Py_buffer *view) except -1:
    """Points view.buf/view.len at data's bytes; True when the view must be released.
    Exact bytes skip the buffer protocol (saves ~10 ns a call)."""
    if PyBytes_CheckExact(data):
        view.buf = PyBytes_AS_STRING(data)
        view.len = PyBytes_GET_SIZE(data)
        return False
    PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    return True


ctypedef uint32_t (*_hash_fn)(uint32_t, const uint8_t *, size_t) noexcept nogil


cdef uint32_t _xxh32_seeded(uint32_t seed, const uint8_t *p, size_t n) noexcept nogil:
    return eng_xxh32(p, n, seed)


cdef uint32_t _murmur2_bits(uint32_t unused, const uint8_t *p, size_t n) noexcept nogil:
    return <uint32_t>eng_murmur2(p, n)


cdef uint32_t _hash(_hash_fn fn, object data, uint32_t value) except? 0xFFFFFFFF:
    """The one buffer-and-GIL boundary of every checksum here: data's bytes in place, the
    GIL released from NOGIL_MIN bytes on."""
    cdef Py_buffer view
    cdef uint32_t r
    cdef bint release = _get_buffer(data, &view)
    try:
        if view.len >= NOGIL_MIN:
            with nogil:
                r = fn(value, <const uint8_t *>view.buf, <size_t>view.len)
        else:
            r = fn(value, <const uint8_t *>view.buf, <size_t>view.len)
    finally:
        if release:
            PyBuffer_Release(&view)
    return r


def crc32c(data, uint32_t value=0):
    """CRC-32C (Castagnoli) of `data` as an unsigned 32-bit int, chainable like zlib.crc32:
    crc32c(b, crc32c(a)) == crc32c(a + b). `value` is a previous result (0 to start);
    OverflowError outside 0..2**32-1. Thread-safe; releases the GIL from 4 KiB on."""
    return _hash(eng_crc32c, data, value)


def crc32c_with(name, data, uint32_t value=0):
    """crc32c computed by the named implementation (for tests and benchmarks).

    Raises ValueError for a name this build does not know and
    ImplementationUnavailableError for one this CPU cannot run."""
    cdef bytes cname = name.encode("ascii") if isinstance(name, str) else bytes(name)
    cdef const char *cn = cname
    cdef Py_buffer view
    cdef uint32_t r = 0
    cdef int status
    cdef bint release = _get_buffer(data, &view)
    try:
        if view.len >= NOGIL_MIN:
            with nogil:
                status = eng_crc32c_with(cn, value, <const uint8_t *>view.buf,
                                         <size_t>view.len, &r)
        else:
            status = eng_crc32c_with(cn, value, <const uint8_t *>view.buf, <size_t>view.len, &r)
    finally:
        if release:
            PyBuffer_Release(&view)
    if status == ENG_CRC_UNKNOWN_IMPL:
        raise_status(ENG_ERR_ARGUMENT, f"unknown CRC-32C implementation {name!r}; known: "
                     f"{', '.join(_crc32c_known_implementations())}")
    if status == ENG_CRC_IMPL_UNAVAILABLE:
        raise_status(
            ENG_ERR_UNAVAILABLE,
            f"CRC-32C implementation {name!r} is unavailable on this CPU or build; available: "
            f"{', '.join(crc32c_implementations())}")
    return r


def crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t length2):
    """CRC-32C of A+B from crc1 = crc32c(A), crc2 = crc32c(B) and length2 = len(B) in bytes,
    without the data, in O(log length2) (zlib's crc32_combine for CRC-32C)."""
    return eng_crc32c_combine(crc1, crc2, length2)


def crc32c_implementation():
    """Name of the CRC-32C implementation this process uses: "avx512_vpclmul", "pclmul",
    "sse42", "armv8_crc" or "portable"."""
    return eng_crc32c_impl().decode("ascii")


def crc32c_implementations():
    """Names of the CRC-32C implementations this CPU and build can run, in the dispatch's
    order of preference, least preferred first (the last is the one used)."""
    return [eng_crc32c_impl_name(i).decode("ascii")
            for i in range(eng_crc32c_impl_count()) if eng_crc32c_impl_available(i)]


def _crc32c_known_implementations():
    """Every implementation name this build knows, runnable here or not."""
    return [eng_crc32c_impl_name(i).decode("ascii") for i in range(eng_crc32c_impl_count())]


def _crc32c_xpow(uint64_t n):
    """x**n mod P (Castagnoli) as a reflected 32-bit int (bit 31 = x**0); for tests."""
    return eng_crc32c_xpow(n)


def _crc32c_fold_constants(unsigned int distance_bits):
    """The (x**(d+31) mod P, x**(d-33) mod P) pair the folding kernels use to move 128 bits
    forward by d bits; ValueError for a distance they do not use. For tests."""
    cdef uint32_t k_lo = 0, k_hi = 0
    if eng_crc32c_fold_constants(distance_bits, &k_lo, &k_hi) != 0:
        raise ValueError(f"no folding constants for a distance of {distance_bits} bits")
    return k_lo, k_hi


def crc32(data, uint32_t value=0):
    """CRC-32 (IEEE, java.util.zip.CRC32) of `data`, chainable and equal to zlib.crc32(data,
    value). Used by legacy magic 0/1 messages. Thread-safe; releases the GIL from 4 KiB on."""
    return _hash(eng_crc32, data, value)


def xxh32(data, uint32_t seed=0):
    """XXH32 of `data` with `seed` (0..2**32-1) as an unsigned 32-bit int. LZ4 frames use
    seed 0. Thread-safe; releases the GIL from 4 KiB on."""
    return _hash(_xxh32_seeded, data, seed)


def murmur2(data):
    """Kafka's Utils.murmur2 of `data` as Java's signed 32-bit int (-2**31..2**31-1).
    Thread-safe; releases the GIL from 4 KiB on."""
    return <int32_t>_hash(_murmur2_bits, data, 0)
