# distutils: sources = [_native/src/crc32c.c]
# cython: language_level=3
"""Kafka's compression codecs: bounded decompression of a records stream, and compression the
way Kafka's producers write it (engine._native.codecs).
"""

# The heavy lifting is done by the codec libraries, which release the GIL while they run;
# framing is parsed here so that every output size is known and bounded before it is
# allocated (no decompression bombs):
#   gzip   RFC 1952 members, possibly concatenated (ISA-L inflate when `isal` is present).
#   snappy xerial snappy-java framing: 8-byte magic 82 'SNAPPY' 00, int32 version,
#          int32 min-compatible version, then (int32 BE length, raw snappy block)*;
#          a payload without that magic is one raw snappy block (non-Java clients write that).
#   lz4    Kafka's LZ4 frame subset: magic 04 22 4D 18, FLG, BD, [8-byte content size], HC,
#          then (uint32 LE size | 0x80000000 when stored, data, [4-byte block checksum])*,
#          end mark 0, [content checksum]. HC = (xxh32(FLG..last descriptor byte) >> 8) & 0xFF,
#          except that magic-0 writers hashed from the frame magic, so magic 0 skips the check.
#   zstd   standard frames (zstd-jni streams without content size; concatenated frames allowed).

from cpython.buffer cimport PyBUF_READ, PyBUF_WRITE, PyBuffer_FillInfo
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy

from batch cimport kb_load_i32, kb_read_uvarint
from checksums cimport eng_xxh32

import enum
import threading

from engine._native.errors import (
    CorruptRecordError,
    KafkaEngineError,
    RecordSizeLimitError,
    UnsupportedCompressionTypeError,
)

cdef object _zstd = None
cdef object _lz4_block = None
cdef object _lz4_frame = None
cdef object _snappy = None
cdef object _inflate = None
cdef object _deflate = None

cdef int CODEC_NONE = 0
cdef int CODEC_GZIP = 1
cdef int CODEC_SNAPPY = 2
cdef int CODEC_LZ4 = 3
cdef int CODEC_ZSTD = 4

cdef bytes XERIAL_MAGIC = b"\x82SNAPPY\x00"
cdef Py_ssize_t XERIAL_HEADER_SIZE = 16
cdef Py_ssize_t XERIAL_BLOCK_SIZE = 32 * 1024
cdef uint32_t LZ4_FRAME_MAGIC = 0x184D2204
cdef Py_ssize_t LZ4_KAFKA_BLOCK_SIZE = 64 * 1024

#: Default bound on one batch's decompressed records section (bytes).
DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024


cdef _load_codecs():
    global _zstd, _lz4_block, _lz4_frame, _snappy, _inflate, _deflate
    import zlib
    import cramjam
    import lz4.block
    import lz4.frame
    import zstandard
    try:
        from isal import isal_zlib as inflate
    except ImportError:  # isal has wheels for x86-64 and arm64; zlib elsewhere
        inflate = zlib
    _zstd = zstandard
    _lz4_block = lz4.block
    _lz4_frame = lz4.frame
    _snappy = cramjam.snappy
    _inflate = inflate
    _deflate = zlib


cdef inline uint32_t _le32(const uint8_t *p) noexcept nogil:
    return <uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline object _known(int64_t v):
    """Errors say None for an unknown position or offset (callers pass -1)."""
    return v if v >= 0 else None


cdef _codec_error(str message, int64_t position, int64_t offset, cls=None):
    raise (cls or CorruptRecordError)(message, position=_known(position), offset=_known(offset))


cdef _limit_error(Py_ssize_t limit, int64_t position, int64_t offset):
    raise RecordSizeLimitError(
        f"Decompressed records exceed the limit of {limit} bytes "
        "(max_decompressed_bytes)", position=_known(position), offset=_known(offset))


def codec_name(int codec):
    """Kafka's name for a codec id ("none", "gzip", "snappy", "lz4", "zstd")."""
    if 0 <= codec <= 4:
        return ("none", "gzip", "snappy", "lz4", "zstd")[codec]
    raise UnsupportedCompressionTypeError(f"Unknown compression type id {codec}")


cdef object _codec_shown(int codec):
    """The codec's name, or its id when it has none (for a repr, which must not raise)."""
    return codec_name(codec) if 0 <= codec <= 4 else codec


cdef uint32_t xxh32(const uint8_t[::1] data, uint32_t seed):
    return eng_xxh32(&data[0] if data.shape[0] else NULL, data.shape[0], seed)


class CompressionType(enum.IntEnum):
    """Codec ids of the attributes' low 3 bits (Kafka's CompressionType)."""
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def name_kafka(self):
        return codec_name(self.value)


cpdef object decompress(int codec, object data, Py_ssize_t limit=DEFAULT_MAX_DECOMPRESSED_BYTES,
                        int magic=2, int64_t position=-1, int64_t offset=-1):
    """Decompresses one Kafka records stream; returns a bytes-like object of at most `limit`
    bytes. Raises CorruptRecordError on malformed input, RecordSizeLimitError past `limit`,
    UnsupportedCompressionTypeError for an unknown codec. `position`/`offset` name the batch
    in error messages."""
    if _zstd is None:
        _load_codecs()
    try:
        if codec == CODEC_GZIP:
            return _gunzip(data, limit, position, offset)
        if codec == CODEC_SNAPPY:
            return _unsnappy(data, limit, position, offset)
        if codec == CODEC_LZ4:
            return _unlz4(data, limit, magic, position, offset)
        if codec == CODEC_ZSTD:
            if magic < 2:
                raise UnsupportedCompressionTypeError(
                    f"zstd is not allowed for magic {magic}", position=_known(position),
                    offset=_known(offset))
            return _unzstd(data, limit, position, offset)
    except KafkaEngineError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # codec libraries raise their own types: name the batch instead
        raise CorruptRecordError(f"Cannot decompress {codec_name(codec)} records: {exc}",
                                 position=_known(position), offset=_known(offset)) from exc
    raise UnsupportedCompressionTypeError(f"Unknown compression type id {codec}",
                                          position=_known(position), offset=_known(offset))


cdef object _gunzip(object data, Py_ssize_t limit, int64_t position, int64_t offset):
    cdef list parts = []
    cdef Py_ssize_t total = 0, pos = 0, n, step
    view = memoryview(data).cast("B")
    n = view.nbytes
    step = n  # the first member gets all the input at once (the common, single-member case)
    while True:
        d = _inflate.decompressobj(31)
        while True:
            chunk = view[pos:pos + step]
            out = d.decompress(chunk, limit - total + 1)
            total += len(out)
            if total > limit:
                _limit_error(limit, position, offset)
            if out:
                parts.append(out)
            if d.unconsumed_tail:
                _limit_error(limit, position, offset)
            pos += len(chunk) - len(d.unused_data)
            if d.eof:
                break
            if pos >= n:
                _codec_error("Truncated gzip stream in record batch", position, offset)
            step *= 2
        if pos >= n:
            break
        # further members: input in growing pieces, since a finished member copies what it
        # was given beyond its end (unused_data): linear however many members there are
        step = 512
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


cdef Py_ssize_t _snappy_raw_length(const uint8_t *p, Py_ssize_t n, int64_t position,
                                   int64_t offset) except -1:
    cdef uint32_t length = 0
    cdef const uint8_t *q = p
    if n <= 0 or kb_read_uvarint(&q, p + n, &length) != 0:  # (p is NULL when n is 0)
        _codec_error("Malformed snappy block length", position, offset)
    return length


cdef list _snappy_blocks(const uint8_t *p, Py_ssize_t n, Py_ssize_t limit, int64_t position,
                         int64_t offset, Py_ssize_t *total_out):
    """(start, length) of every raw snappy block of a payload (xerial chunks, or the payload as
    one block); `total_out` gets their declared decompressed size, checked against `limit`."""
    cdef Py_ssize_t pos, total = 0, chunk
    cdef list blocks = []
    if n >= XERIAL_HEADER_SIZE and memcmp(p, <const char *>XERIAL_MAGIC, 8) == 0:
        pos = XERIAL_HEADER_SIZE
        while pos < n:
            if n - pos < 4:
                _codec_error("Truncated xerial snappy chunk header", position, offset)
            chunk = kb_load_i32(p + pos)
            pos += 4
            if chunk < 0 or chunk > n - pos:
                _codec_error(f"Xerial snappy chunk of {chunk} bytes overruns the stream",
                             position, offset)
            total += _snappy_raw_length(p + pos, chunk, position, offset)
            if total > limit:
                _limit_error(limit, position, offset)
            blocks.append((pos, chunk))
            pos += chunk
    else:
        total = _snappy_raw_length(p, n, position, offset)
        if total > limit:
            _limit_error(limit, position, offset)
        blocks.append((0, n))
    total_out[0] = total
    return blocks


cdef Py_ssize_t _unsnappy_into(const uint8_t *p, list blocks, uint8_t *out, Py_ssize_t total,
                               int64_t position, int64_t offset) except -1:
    """Decompresses the blocks of the payload at `p` into `out` (room for `total` bytes),
    handing the codec plain memoryviews over the pointers, as the lz4 and zstd paths take
    pointers."""
    cdef Py_ssize_t pos, chunk, out_at = 0
    for pos, chunk in blocks:
        out_at += _snappy.decompress_raw_into(
            PyMemoryView_FromMemory(<char *>p + pos, chunk, PyBUF_READ),
            PyMemoryView_FromMemory(<char *>out + out_at, total - out_at, PyBUF_WRITE))
    if out_at != total:
        _codec_error("Snappy blocks produced fewer bytes than they declared", position, offset)
    return total


cdef object _unsnappy(object data, Py_ssize_t limit, int64_t position, int64_t offset):
    cdef const uint8_t[::1] mv = memoryview(data).cast("B")
    cdef Py_ssize_t n = mv.shape[0], total = 0
    cdef const uint8_t *p = &mv[0] if n else NULL
    cdef list blocks = _snappy_blocks(p, n, limit, position, offset, &total)
    out = bytearray(total)
    _unsnappy_into(p, blocks, <uint8_t *><char *>out, total, position, offset)
    return out


cdef Py_ssize_t _lz4_frame_header(const uint8_t *p, Py_ssize_t n, int magic, int64_t position,
                                  int64_t offset, uint8_t *flg_out,
                                  Py_ssize_t *block_max_out) except -1:
    """Checks a Kafka LZ4 frame's descriptor; returns where its first block starts."""
    cdef uint8_t flg, bd
    cdef Py_ssize_t desc_end
    if n < 7 or _le32(p) != LZ4_FRAME_MAGIC:
        _codec_error("LZ4 frame magic not found", position, offset)
    flg = p[4]
    bd = p[5]
    if (flg >> 6) != 1:
        _codec_error(f"Unsupported LZ4 frame version {flg >> 6}", position, offset)
    if flg & 0x03:
        _codec_error("LZ4 frame has reserved FLG bits set", position, offset)
    if not (flg & 0x20):
        _codec_error("Dependent block stream is unsupported (LZ4 FLG block independence)",
                     position, offset)
    if (bd & 0x8F) or ((bd >> 4) & 0x07) < 4:
        _codec_error(f"Invalid LZ4 BD byte 0x{bd:02x}", position, offset)
    desc_end = 6 + (8 if flg & 0x08 else 0)
    if n < desc_end + 1:
        _codec_error("Truncated LZ4 frame descriptor", position, offset)
    if magic >= 1:
        if ((eng_xxh32(p + 4, desc_end - 4, 0) >> 8) & 0xFF) != p[desc_end]:
            _codec_error("LZ4 frame descriptor checksum mismatch", position, offset)
    flg_out[0] = flg
    block_max_out[0] = 1 << (8 + 2 * ((bd >> 4) & 0x07))
    return desc_end + 1


cdef object _unlz4(object data, Py_ssize_t limit, int magic, int64_t position, int64_t offset):
    cdef const uint8_t[::1] mv = memoryview(data).cast("B")
    cdef Py_ssize_t n = mv.shape[0], pos, block_max, size, total = 0
    cdef const uint8_t *p = &mv[0] if n else NULL
    cdef uint8_t flg
    cdef uint32_t word
    cdef bint stored
    cdef list parts = []
    pos = _lz4_frame_header(p, n, magic, position, offset, &flg, &block_max)
    while True:
        if n - pos < 4:
            _codec_error("Truncated LZ4 frame: block size missing", position, offset)
        word = _le32(p + pos)
        pos += 4
        if word == 0:
            break
        stored = (word & 0x80000000) != 0
        size = word & 0x7FFFFFFF
        if size > block_max:
            _codec_error(f"LZ4 block size {size} exceeds the frame's maximum {block_max}",
                         position, offset)
        if size > n - pos:
            _codec_error("Truncated LZ4 block", position, offset)
        if stored:
            block = bytes(mv[pos:pos + size])
        elif block_max <= limit - total:
            block = _lz4_block.decompress(mv[pos:pos + size], uncompressed_size=block_max)
        else:
            # never let one block allocate past the limit: cap its output at what is left
            try:
                block = _lz4_block.decompress(mv[pos:pos + size],
                                              uncompressed_size=max(limit - total, 1))
            except _lz4_block.LZ4BlockError:
                raise RecordSizeLimitError(
                    f"LZ4 block would exceed the limit of {limit} decompressed bytes "
                    "(max_decompressed_bytes), or is corrupt", position=_known(position),
                    offset=_known(offset)) from None
        total += len(block)
        if total > limit:
            _limit_error(limit, position, offset)
        parts.append(block)
        pos += size
        if flg & 0x10:
            if n - pos < 4:
                _codec_error("Truncated LZ4 block checksum", position, offset)
            if xxh32(mv[pos - size:pos], 0) != _le32(p + pos):
                _codec_error("LZ4 block checksum mismatch", position, offset)
            pos += 4
    # a content checksum (FLG bit 2) may follow; Kafka reads it without verifying
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


cdef uint32_t ZSTD_MAGIC = 0xFD2FB528
cdef Py_ssize_t ZSTD_BLOCK_MAX = 128 * 1024


cdef Py_ssize_t _zstd_bound(const uint8_t *p, Py_ssize_t n, int64_t position,
                            int64_t offset) except -1:
    """Walks the frames' block headers (RFC 8878): proves the stream is whole and returns an
    upper bound of its decompressed size, without decompressing anything."""
    cdef Py_ssize_t pos = 0, bound = 0, window
    cdef uint32_t magic
    cdef uint8_t fhd
    if n == 0:
        _codec_error("Empty zstd stream", position, offset)
    while pos < n:
        if n - pos < 4:
            _codec_error("Truncated zstd frame magic", position, offset)
        magic = _le32(p + pos)
        pos += 4
        if (magic & 0xFFFFFFF0) == 0x184D2A50:  # skippable frame
            if n - pos < 4 or _le32(p + pos) > <uint32_t>(n - pos - 4):
                _codec_error("Truncated zstd skippable frame", position, offset)
            pos += 4 + _le32(p + pos)
            continue
        if magic != ZSTD_MAGIC:
            _codec_error(f"Not a zstd frame (magic 0x{magic:08x})", position, offset)
        if pos >= n:
            _codec_error("Truncated zstd frame header", position, offset)
        fhd = p[pos]
        pos = _zstd_frame_header(p, n, pos + 1, fhd, &window, position, offset)
        pos = _zstd_blocks(p, n, pos, window, &bound, position, offset)
        if fhd & 0x04:
            if n - pos < 4:
                _codec_error("Truncated zstd content checksum", position, offset)
            pos += 4
    return bound


cdef Py_ssize_t _zstd_frame_header(const uint8_t *p, Py_ssize_t n, Py_ssize_t pos, uint8_t fhd,
                                   Py_ssize_t *window, int64_t position,
                                   int64_t offset) except -1:
    """Steps over a frame header after its descriptor byte `fhd`; sets the frame's window."""
    cdef Py_ssize_t fcs_size
    cdef uint8_t wd
    if fhd & 0x08:
        _codec_error("zstd frame header has its reserved bit set", position, offset)
    fcs_size = (0, 2, 4, 8)[fhd >> 6]
    if fcs_size == 0 and (fhd & 0x20):
        fcs_size = 1
    window[0] = ZSTD_BLOCK_MAX
    if not (fhd & 0x20):
        if pos >= n:
            _codec_error("Truncated zstd frame header", position, offset)
        wd = p[pos]
        pos += 1
        window[0] = <Py_ssize_t>1 << (10 + (wd >> 3))  # Py_ssize_t: exponents reach 31
        window[0] += (window[0] >> 3) * (wd & 7)
    return pos + (0, 1, 2, 4)[fhd & 0x03] + fcs_size


cdef Py_ssize_t _zstd_blocks(const uint8_t *p, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t window,
                             Py_ssize_t *bound, int64_t position, int64_t offset) except -1:
    """Steps over a frame's blocks up to its last one, adding their decompressed sizes (at
    most) to `bound`; returns the position after them."""
    cdef Py_ssize_t size
    cdef uint32_t header
    cdef int last, btype
    while True:
        if n - pos < 3:
            _codec_error("Truncated zstd block header", position, offset)
        header = p[pos] | (<uint32_t>p[pos + 1] << 8) | (<uint32_t>p[pos + 2] << 16)
        pos += 3
        last = header & 1
        btype = (header >> 1) & 3
        size = header >> 3
        if btype == 3:
            _codec_error("Reserved zstd block type", position, offset)
        if btype == 1:  # RLE: one byte, repeated `size` times
            bound[0] += size
            size = 1
        elif btype == 0:
            bound[0] += size
        else:
            bound[0] += min(window, ZSTD_BLOCK_MAX)
        if size > n - pos:
            _codec_error("Truncated zstd block", position, offset)
        pos += size
        if last:
            return pos


cdef object _thread_state = None


cdef object _zstd_dctx():
    """This thread's decompression context: creating one per batch cost ~12% of zstd decode
    time, and a context may not be shared between threads."""
    global _thread_state
    if _thread_state is None:
        import threading
        _thread_state = threading.local()
    dctx = getattr(_thread_state, "zstd", None)
    if dctx is None:
        dctx = _thread_state.zstd = _zstd.ZstdDecompressor()
    return dctx


cdef object _unzstd(object data, Py_ssize_t limit, int64_t position, int64_t offset):
    cdef const uint8_t[::1] mv = memoryview(data).cast("B")
    cdef Py_ssize_t n = mv.shape[0]
    cdef Py_ssize_t bound = _zstd_bound(&mv[0] if n else NULL, n, position, offset)
    cdef long long declared = -1
    if _le32(&mv[0]) != ZSTD_MAGIC:
        # a skippable frame first: the one-shot call would take its length for the content
        # size; the stream below skips it
        bound = limit + 1
    else:
        declared = _zstd.frame_content_size(data)
    if declared > limit:
        _limit_error(limit, position, offset)
    if declared >= 0 or bound <= limit:
        try:
            # one frame (zstd-jni's streams are one frame): sized by the header or the bound
            return _zstd_dctx().decompress(
                data, max_output_size=0 if declared >= 0 else bound, allow_extra_data=False)
        except _zstd.ZstdError as exc:
            if "unused data" not in str(exc):
                raise
    # several frames, or a bound above the limit: stream, counting every byte
    reader = _zstd_dctx().stream_reader(data, read_across_frames=True)
    cdef list parts = []
    cdef Py_ssize_t total = 0, want = max(4 * n, 65536)
    while True:
        chunk = reader.read(min(want, limit - total + 1))
        if not chunk:
            break
        total += len(chunk)
        if total > limit:
            _limit_error(limit, position, offset)
        parts.append(chunk)
        want = max(want, total)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# ---- decompression into reused buffers through the codecs' C APIs --------------------------
#
# The lz4 and zstandard wheels export their libraries' C symbols; when the symbols resolve
# (dlsym on the extension already shipped with the package, no build-time dependency), batch
# sections are decompressed straight into a reused buffer without the GIL and without
# allocating a Python object per batch. Snappy goes into the same buffer through cramjam's
# decompress_raw_into. Where a symbol does not resolve (another platform or build), and for
# gzip, the section comes from `decompress` as before.

cdef extern from *:
    """
    #ifdef _WIN32
    static void *eng_codec_sym(const char *lib, const char *name)
    { (void)lib; (void)name; return NULL; }
    #else
    #include <dlfcn.h>
    /* The library was loaded by the codec package's import (or is loaded here, once, local to
       this lookup); the handle is never closed: extension modules are never unloaded. */
    static void *eng_codec_sym(const char *lib, const char *name)
    {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        return h ? dlsym(h, name) : NULL;
    }
    #endif
    """
    void *eng_codec_sym(const char *lib, const char *name)

ctypedef int (*lz4_decompress_safe_t)(const char *src, char *dst, int n, int cap) noexcept nogil
ctypedef void *(*zstd_create_dctx_t)() noexcept nogil
ctypedef size_t (*zstd_free_dctx_t)(void *dctx) noexcept nogil
ctypedef size_t (*zstd_decompress_dctx_t)(void *dctx, void *dst, size_t cap, const void *src,
                                          size_t n) noexcept nogil
ctypedef unsigned (*zstd_is_error_t)(size_t code) noexcept nogil
ctypedef const char *(*zstd_error_name_t)(size_t code) noexcept nogil
ctypedef int (*zstd_error_code_t)(size_t code) noexcept nogil

cdef lz4_decompress_safe_t _lz4_safe = NULL
cdef zstd_create_dctx_t _zstd_create = NULL
cdef zstd_free_dctx_t _zstd_free = NULL
cdef zstd_decompress_dctx_t _zstd_decompress = NULL
cdef zstd_is_error_t _zstd_is_error = NULL
cdef zstd_error_name_t _zstd_error_name = NULL
cdef zstd_error_code_t _zstd_error_code = NULL
cdef bint _c_api_bound = False
cdef bint _c_api_enabled = True
cdef int ZSTD_ERROR_DST_TOO_SMALL = 70  # ZSTD_error_dstSize_tooSmall (zstd_errors.h)


cdef _bind_c_api():
    """Resolves the codecs' C entry points from the packages' own extension modules."""
    global _lz4_safe, _zstd_create, _zstd_free, _zstd_decompress, _zstd_is_error
    global _zstd_error_name, _zstd_error_code, _c_api_bound
    import importlib.util
    import os
    _c_api_bound = True
    lz4_lib = importlib.util.find_spec("lz4.block._block")
    zstd_lib = importlib.util.find_spec("zstandard._cffi")
    if lz4_lib is not None and lz4_lib.origin:
        path = os.fsencode(lz4_lib.origin)
        _lz4_safe = <lz4_decompress_safe_t>eng_codec_sym(path, b"LZ4_decompress_safe")
    if zstd_lib is not None and zstd_lib.origin:
        path = os.fsencode(zstd_lib.origin)
        _zstd_create = <zstd_create_dctx_t>eng_codec_sym(path, b"ZSTD_createDCtx")
        _zstd_free = <zstd_free_dctx_t>eng_codec_sym(path, b"ZSTD_freeDCtx")
        _zstd_decompress = <zstd_decompress_dctx_t>eng_codec_sym(path, b"ZSTD_decompressDCtx")
        _zstd_is_error = <zstd_is_error_t>eng_codec_sym(path, b"ZSTD_isError")
        _zstd_error_name = <zstd_error_name_t>eng_codec_sym(path, b"ZSTD_getErrorName")
        _zstd_error_code = <zstd_error_code_t>eng_codec_sym(path, b"ZSTD_getErrorCode")
        if (_zstd_create == NULL or _zstd_free == NULL or _zstd_decompress == NULL
                or _zstd_is_error == NULL or _zstd_error_name == NULL
                or _zstd_error_code == NULL):
            _zstd_decompress = NULL


def _codec_c_api(enabled=None):
    """Which codecs decompress batch sections through their C API ({"lz4": bool, "zstd":
    bool}); `enabled=False` turns that off (the Python paths are used), True back on."""
    global _c_api_enabled
    if not _c_api_bound:
        _bind_c_api()
    if enabled is not None:
        _c_api_enabled = bool(enabled)
    return {"lz4": _c_api_enabled and _lz4_safe != NULL,
            "zstd": _c_api_enabled and _zstd_decompress != NULL}


cdef class Scratch:
    """A grow-only output buffer reused across batches (one per thread, see take_scratch).
    A fresh one, never handed back, may also own one decompressed section for good: it
    exports its first `length` bytes (read-only) to whatever keeps views into them."""

    def __dealloc__(self):
        free(self.data)

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self.data, self.length, 1, flags)

    cdef int reserve(self, size_t n, size_t keep=0) except -1:
        """Room for `n` bytes, keeping the first `keep` (growth doubles, so a frame of many
        blocks is copied a logarithmic number of times, and only the first time a thread
        meets a section that large)."""
        cdef size_t cap
        cdef uint8_t *p
        if n <= self.cap:
            return 0
        cap = max(n, 2 * self.cap, <size_t>65536)
        if keep:
            p = <uint8_t *>realloc(self.data, cap)
        else:
            free(self.data)  # nothing to keep: no copy
            self.data = NULL
            self.cap = 0
            p = <uint8_t *>malloc(cap)
        if p == NULL:
            raise MemoryError()
        self.data = p
        self.cap = cap
        return 0


cdef object _scratch_local = threading.local()
#: Buffers above this are freed after use rather than kept by the thread.
cdef size_t SCRATCH_KEEP_BYTES = 16 * 1024 * 1024


cdef Scratch take_scratch():
    """This thread's scratch buffer, taken out so a re-entrant decode (a finalizer run by the
    garbage collector mid-batch) gets a fresh one instead of overwriting it."""
    s = getattr(_scratch_local, "scratch", None)
    if s is None:
        return Scratch()
    _scratch_local.scratch = None
    return <Scratch>s


cdef int give_scratch(Scratch s) except -1:
    """Hands the buffer back to the thread for its next batch."""
    if s is not None and s.cap <= SCRATCH_KEEP_BYTES:
        _scratch_local.scratch = s
    return 0


cdef void _free_dctx(object capsule) noexcept:
    _zstd_free(PyCapsule_GetPointer(capsule, b"zstd.dctx"))


cdef void *_thread_dctx() except NULL:
    """This thread's ZSTD_DCtx (a context may not be shared between threads)."""
    capsule = getattr(_scratch_local, "zstd_dctx", None)
    if capsule is None:
        dctx = _zstd_create()
        if dctx == NULL:
            raise MemoryError()
        capsule = _scratch_local.zstd_dctx = PyCapsule_New(dctx, b"zstd.dctx", _free_dctx)
    return PyCapsule_GetPointer(capsule, b"zstd.dctx")


cdef Py_ssize_t _lz4_into(const uint8_t *p, Py_ssize_t n, int magic, Scratch s,
                          Py_ssize_t limit, int64_t position, int64_t offset) except -1:
    """A Kafka LZ4 frame into `s` through LZ4_decompress_safe; returns the bytes produced."""
    cdef uint8_t flg
    cdef Py_ssize_t block_max, pos, size, total = 0, room
    cdef uint32_t word
    cdef int got
    pos = _lz4_frame_header(p, n, magic, position, offset, &flg, &block_max)
    while True:
        if n - pos < 4:
            _codec_error("Truncated LZ4 frame: block size missing", position, offset)
        word = _le32(p + pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        if size > block_max:
            _codec_error(f"LZ4 block size {size} exceeds the frame's maximum {block_max}",
                         position, offset)
        if size > n - pos:
            _codec_error("Truncated LZ4 block", position, offset)
        room = min(block_max, limit - total)
        if word & 0x80000000:  # stored
            if size > limit - total:
                _limit_error(limit, position, offset)
            s.reserve(total + size, total)
            memcpy(s.data + total, p + pos, size)
            total += size
        else:
            s.reserve(total + max(room, 1), total)
            with nogil:
                got = _lz4_safe(<const char *>p + pos, <char *>s.data + total, <int>size,
                                <int>room)
            if got < 0:
                if room < block_max:
                    raise RecordSizeLimitError(
                        f"LZ4 block would exceed the limit of {limit} decompressed bytes "
                        "(max_decompressed_bytes), or is corrupt", position=_known(position),
                        offset=_known(offset))
                _codec_error("Cannot decompress lz4 records: corrupt LZ4 block", position,
                             offset)
            total += got
        pos += size
        if flg & 0x10:
            if n - pos < 4:
                _codec_error("Truncated LZ4 block checksum", position, offset)
            if eng_xxh32(p + pos - size, size, 0) != _le32(p + pos):
                _codec_error("LZ4 block checksum mismatch", position, offset)
            pos += 4
    return total


cdef Py_ssize_t _zstd_into(const uint8_t *p, Py_ssize_t n, Scratch s, Py_ssize_t limit,
                           int64_t position, int64_t offset) except -1:
    """Zstd frames into `s` through ZSTD_decompressDCtx, sized by the block-header walk's
    bound (capped at `limit`, so running out of room past it is the limit error)."""
    cdef Py_ssize_t bound = _zstd_bound(p, n, position, offset)
    cdef size_t cap = <size_t>min(bound, limit), r
    cdef void *dctx = _thread_dctx()
    s.reserve(cap if cap else 1)
    with nogil:
        r = _zstd_decompress(dctx, s.data, cap, p, n)
    if _zstd_is_error(r):
        if _zstd_error_code(r) == ZSTD_ERROR_DST_TOO_SMALL and bound > limit:
            _limit_error(limit, position, offset)
        _codec_error("Cannot decompress zstd records: "
                     + _zstd_error_name(r).decode("ascii", "replace"), position, offset)
    return <Py_ssize_t>r


cdef object decompress_section(int codec, object raw, const uint8_t *p, Py_ssize_t n,
                               Scratch s, Py_ssize_t limit, int magic, int64_t position,
                               int64_t offset, const uint8_t **out, size_t *out_len):
    """Decompresses one batch's records stream (`raw`, whose bytes are `p`/`n`), into `s`
    when the codec can write there, else into a new object; points `out`/`out_len` at the
    result and returns the object that owns it. Errors as `decompress`."""
    cdef Py_ssize_t total = 0
    cdef list blocks
    if not _c_api_bound:
        _bind_c_api()
    if _zstd is None:
        _load_codecs()
    if _c_api_enabled:
        if codec == CODEC_LZ4 and _lz4_safe != NULL:
            total = _lz4_into(p, n, magic, s, limit, position, offset)
        elif codec == CODEC_ZSTD and magic >= 2 and _zstd_decompress != NULL:
            total = _zstd_into(p, n, s, limit, position, offset)
        elif codec == CODEC_SNAPPY:
            blocks = _snappy_blocks(p, n, limit, position, offset, &total)
            s.reserve(total if total else 1)
            try:
                _unsnappy_into(p, blocks, s.data, total, position, offset)
            except KafkaEngineError:
                raise
            except Exception as exc:  # cramjam's own error types: name the batch instead
                raise CorruptRecordError(f"Cannot decompress snappy records: {exc}",
                                         position=_known(position),
                                         offset=_known(offset)) from exc
        else:
            return _owned_section(decompress(codec, raw, limit, magic, position, offset),
                                  out, out_len)
        out[0] = s.data
        out_len[0] = <size_t>total
        s.length = total
        return s
    return _owned_section(decompress(codec, raw, limit, magic, position, offset), out, out_len)


cdef object _owned_section(object data, const uint8_t **out, size_t *out_len):
    cdef const uint8_t[::1] mv = memoryview(data).cast("B")
    out[0] = &mv[0] if mv.shape[0] else <const uint8_t *>b""
    out_len[0] = <size_t>mv.shape[0]
    return mv


cpdef bytes compress(int codec, object data, int level=-1):
    """Compresses a records section the way Kafka's producers write it (Kafka's default
    level when `level` is -1): gzip members, xerial-framed snappy in 32 KiB blocks, Kafka's
    LZ4 frame (64 KiB independent blocks, no checksums), a zstd frame."""
    if _zstd is None:
        _load_codecs()
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        c = _deflate.compressobj(6 if level < 0 else level, 8, 31)
        return c.compress(data) + c.flush()
    if codec == CODEC_SNAPPY:
        return _xerial_compress(data)
    if codec == CODEC_LZ4:
        return _lz4_frame.compress(
            data, compression_level=0 if level < 0 else level,
            block_size=_lz4_frame.BLOCKSIZE_MAX64KB, block_linked=False,
            content_checksum=False, block_checksum=False, store_size=False)
    if codec == CODEC_ZSTD:
        return _zstd.ZstdCompressor(level=3 if level < 0 else level).compress(data)
    raise UnsupportedCompressionTypeError(f"Unknown compression type id {codec}")


cdef bytes _xerial_compress(object data):
    cdef const uint8_t[::1] mv = memoryview(data).cast("B")
    cdef Py_ssize_t n = mv.shape[0], pos = 0
    out = bytearray(XERIAL_MAGIC)
    out += b"\x00\x00\x00\x01\x00\x00\x00\x01"
    while pos < n:
        block = bytes(_snappy.compress_raw(mv[pos:pos + XERIAL_BLOCK_SIZE]))
        out += len(block).to_bytes(4, "big")
        out += block
        pos += XERIAL_BLOCK_SIZE
    return bytes(out)
