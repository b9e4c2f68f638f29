# Kafka's compression codecs (included by records.pyx).
#
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

from libc.stdint cimport uint8_t, uint32_t

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


cdef _codec_error(str message, int64_t position, int64_t offset, cls=None):
    raise (cls or CorruptRecordError)(message, position=position, offset=offset)


cdef _limit_error(Py_ssize_t limit, int64_t position, int64_t offset):
    raise RecordSizeLimitError(
        f"Decompressed records exceed the limit of {limit} bytes "
        "(max_decompressed_bytes)", position=position, offset=offset)


def codec_name(int codec):
    """Kafka's name for a codec id ("none", "gzip", "snappy", "lz4", "zstd")."""
    if 0 <= codec <= 4:
        return ("none", "gzip", "snappy", "lz4", "zstd")[codec]
    raise UnsupportedCompressionTypeError(f"Unknown compression type id {codec}")


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
                    f"zstd is not allowed for magic {magic}", position=position, offset=offset)
            return _unzstd(data, limit, position, offset)
    except KafkaEngineError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # codec libraries raise their own types: name the batch instead
        raise CorruptRecordError(f"Cannot decompress {codec_name(codec)} records: {exc}",
                                 position=position, offset=offset) from exc
    raise UnsupportedCompressionTypeError(f"Unknown compression type id {codec}",
                                          position=position, offset=offset)


cdef object _gunzip(object data, Py_ssize_t limit, int64_t position, int64_t offset):
    cdef list parts = []
    cdef Py_ssize_t total = 0
    rest = data
    while True:
        d = _inflate.decompressobj(31)
        out = d.decompress(rest, limit - total + 1)
        total += len(out)
        if total > limit:
            _limit_error(limit, position, offset)
        parts.append(out)
        if not d.eof:
            if d.unconsumed_tail:
                _limit_error(limit, position, offset)
            _codec_error("Truncated gzip stream in record batch", position, offset)
        rest = d.unused_data
        if not rest:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


cdef Py_ssize_t _snappy_raw_length(const uint8_t *p, Py_ssize_t n, int64_t position,
                                   int64_t offset) except -1:
    cdef uint32_t length = 0
    cdef const uint8_t *q = p
    if kb_read_uvarint(&q, p + n, &length) != 0:
        _codec_error("Malformed snappy block length", position, offset)
    return length


cdef object _unsnappy(object data, Py_ssize_t limit, int64_t position, int64_t offset):
    cdef const uint8_t[::1] mv = memoryview(data).cast("B")
    cdef Py_ssize_t n = mv.shape[0], pos, total = 0, chunk, out_at = 0, produced
    cdef const uint8_t *p = &mv[0] if n else NULL
    cdef list blocks = []
    if n >= XERIAL_HEADER_SIZE and bytes(mv[:8]) == XERIAL_MAGIC:
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
    out = bytearray(total)
    view = memoryview(out)
    for pos, chunk in blocks:
        produced = _snappy.decompress_raw_into(mv[pos:pos + chunk], view[out_at:])
        out_at += produced
    if out_at != total:
        _codec_error("Snappy blocks produced fewer bytes than they declared", position, offset)
    return out


cdef object _unlz4(object data, Py_ssize_t limit, int magic, int64_t position, int64_t offset):
    cdef const uint8_t[::1] mv = memoryview(data).cast("B")
    cdef Py_ssize_t n = mv.shape[0], pos, desc_end, block_max, size, total = 0
    cdef const uint8_t *p = &mv[0] if n else NULL
    cdef uint8_t flg, bd
    cdef uint32_t word
    cdef bint stored
    cdef list parts = []
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
    block_max = 1 << (8 + 2 * ((bd >> 4) & 0x07))
    desc_end = 6 + (8 if flg & 0x08 else 0)
    if n < desc_end + 1:
        _codec_error("Truncated LZ4 frame descriptor", position, offset)
    if magic >= 1:
        if ((xxh32(mv[4:desc_end], 0) >> 8) & 0xFF) != p[desc_end]:
            _codec_error("LZ4 frame descriptor checksum mismatch", position, offset)
    pos = desc_end + 1
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
        else:
            block = _lz4_block.decompress(mv[pos:pos + size], uncompressed_size=block_max)
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


cdef object _unzstd(object data, Py_ssize_t limit, int64_t position, int64_t offset):
    cdef long long declared = _zstd.frame_content_size(data)
    cdef Py_ssize_t n = len(data)
    if declared >= 0:
        if declared > limit:
            _limit_error(limit, position, offset)
        try:
            return _zstd.ZstdDecompressor().decompress(data, allow_extra_data=False)
        except _zstd.ZstdError:
            pass  # concatenated frames (or damage): the bounded streaming path decides
    reader = _zstd.ZstdDecompressor().stream_reader(data, read_across_frames=True)
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
