# distutils:sources=[_native/src/batch.c,_native/src/bigbuf.c,_native/src/crc32c.c,_native/src/append.c]
# cython: language_level=3
# (the source list is one unspaced word: a directive cannot wrap, and linters let such a
# comment run past the line length)
"""Kafka record batches: scan, decode (records and columns), legacy messages, codecs, builder.

Byte layouts are documented in `_native/include/batch.h` and Kafka's DefaultRecordBatch /
LegacyRecord. All scanning and parsing runs with the GIL released on any buffer (bytes,
bytearray, memoryview, mmap, numpy); decompression runs in the codec libraries, which
release it too. Objects returned here keep the buffer they were decoded from alive.
"""

cimport cython
cimport numpy as cnp
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from batch cimport *

import enum

import numpy as np

from engine._native.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaEngineError,
    RecordSizeLimitError,
    UnsupportedCompressionTypeError,
)

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    # numpy's .pxd leaves it out because it steals a reference to the descriptor
    object _PyArray_NewFromDescr "PyArray_NewFromDescr" (
        void *subtype, cnp.dtype descr, int nd, cnp.npy_intp *dims, cnp.npy_intp *strides,
        void *data, int flags, object obj)


cdef extern from "checksums.h" nogil:
    uint32_t eng_crc32c(uint32_t crc, const uint8_t *p, size_t n)
    uint32_t eng_crc32(uint32_t crc, const uint8_t *p, size_t n)
    uint32_t eng_xxh32(const uint8_t *p, size_t n, uint32_t seed)


include "_codecs.pxi"


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


class TimestampType(enum.IntEnum):
    """Kafka's TimestampType; magic 0 data has none."""
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def name_kafka(self):
        return ("NoTimestampType", "CreateTime", "LogAppendTime")[self.value + 1]


cdef tuple _TIMESTAMP_TYPES = (TimestampType.NO_TIMESTAMP_TYPE, TimestampType.CREATE_TIME,
                               TimestampType.LOG_APPEND_TIME)
cdef tuple _COMPRESSION_TYPES = tuple(CompressionType)
cdef tuple _NO_HEADERS = ()

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# One scan row per entry; mirrors eng_batch_header (checked at import).
BATCH_HEADER_DTYPE = np.dtype([
    ("position", "<i8"), ("base_offset", "<i8"), ("last_offset", "<i8"),
    ("base_timestamp", "<i8"), ("max_timestamp", "<i8"), ("producer_id", "<i8"),
    ("size", "<i4"), ("partition_leader_epoch", "<i4"), ("base_sequence", "<i4"),
    ("record_count", "<i4"), ("crc", "<u4"), ("attributes", "<i2"), ("producer_epoch", "<i2"),
    ("magic", "i1"), ("compression", "i1"), ("timestamp_type", "i1"),
    ("is_transactional", "?"), ("is_control", "?"), ("has_delete_horizon", "?"),
    ("crc_valid", "?"), ("_pad", "u1"),
], align=True)
if BATCH_HEADER_DTYPE.itemsize != sizeof(eng_batch_header):
    raise ImportError("BATCH_HEADER_DTYPE does not match the native batch header layout")
cdef cnp.dtype _HEADER_DESCR = BATCH_HEADER_DTYPE


cdef cnp.ndarray _new_headers(size_t count):
    """An uninitialized BATCH_HEADER_DTYPE array of `count` rows over a bytearray. numpy's own
    allocation costs ~0.8 us more for any structured dtype, more than a one-batch scan."""
    cdef bytearray store = PyByteArray_FromStringAndSize(NULL, count * sizeof(eng_batch_header))
    cdef cnp.npy_intp dims[1]
    dims[0] = <cnp.npy_intp>count
    Py_INCREF(_HEADER_DESCR)  # stolen by PyArray_NewFromDescr
    cdef cnp.ndarray arr = _PyArray_NewFromDescr(
        <void *>cnp.ndarray, _HEADER_DESCR, 1, dims, NULL, PyByteArray_AS_STRING(store),
        cnp.NPY_ARRAY_CARRAY, None)
    Py_INCREF(store)  # stolen by PyArray_SetBaseObject
    cnp.PyArray_SetBaseObject(arr, store)
    return arr


cdef class BufferView:
    """A held buffer export (PEP 3118) of any C-contiguous object; releases it on collection.

    While one exists the exporter cannot be resized or closed (an mmap raises BufferError).
    """
    cdef Py_buffer view
    cdef bint held
    cdef readonly object obj
    cdef const uint8_t *ptr
    cdef readonly Py_ssize_t nbytes

    def __cinit__(self, obj):
        PyObject_GetBuffer(obj, &self.view, PyBUF_SIMPLE)
        self.held = True
        self.obj = obj
        self.ptr = <const uint8_t *>self.view.buf
        self.nbytes = self.view.len

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)

    def __len__(self):
        return self.nbytes


cdef inline BufferView _view(object data):
    if type(data) is BufferView:
        return <BufferView>data
    return BufferView(data)


cdef int _raise_error(const eng_error *err) except -1:
    cdef str msg = err.message.decode("utf-8", "replace")
    position = err.position if err.position >= 0 else None
    offset = err.offset if err.offset >= 0 else None
    if err.code == ENG_ERR_NOMEM:
        raise MemoryError(msg)
    cls = {ENG_ERR_INVALID: InvalidRecordError, ENG_ERR_LIMIT: RecordSizeLimitError,
           ENG_ERR_CODEC: UnsupportedCompressionTypeError}.get(err.code, CorruptRecordError)
    raise cls(msg, position=position, offset=offset)


def scan(object data, bint verify_crc=True):
    """Scans every whole entry (v2 batch or v0/v1 message) of `data` in one pass.

    Returns (headers, valid_bytes): a BATCH_HEADER_DTYPE array, one row per entry, and the
    end of the last whole entry; bytes after it are a partial trailing entry, ignored as
    Kafka's readers do. CRCs (CRC-32C for v2, CRC-32 for v0/v1) are checked into
    `crc_valid` when `verify_crc`. Raises CorruptRecordError on impossible framing (size
    below the minimum overhead, unknown magic). Thread-safe; the GIL is released.
    """
    cdef BufferView v = _view(data)
    cdef size_t count = 0, valid = 0
    cdef eng_error err
    cdef int rc
    with nogil:
        rc = eng_scan_count(v.ptr, v.nbytes, &count, &valid, &err)
    if rc != ENG_OK:
        _raise_error(&err)
    cdef cnp.ndarray headers = _new_headers(count)
    cdef eng_batch_header *out = <eng_batch_header *>cnp.PyArray_DATA(headers)
    with nogil:
        eng_scan_fill(v.ptr, count, verify_crc, out)
    return headers, valid


@cython.freelist(256)
cdef class Record:
    """One record with Kafka's field names. `headers` is a tuple of (str, bytes | None);
    header keys are decoded as UTF-8 with surrogateescape so any bytes round-trip."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef int8_t _timestamp_type
    cdef readonly object key
    cdef readonly object value
    cdef readonly tuple headers
    cdef readonly int32_t sequence
    cdef readonly bint is_control

    @property
    def timestamp_type(self):
        return _TIMESTAMP_TYPES[self._timestamp_type + 1]

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return self._astuple() == (<Record>other)._astuple()

    def __hash__(self):
        return hash(self._astuple())

    cdef tuple _astuple(self):
        return (self.offset, self.timestamp, self._timestamp_type, self.key, self.value,
                self.headers, self.sequence, self.is_control)

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, "
                f"key={self.key!r}, value={_short(self.value)}, headers={self.headers!r})")


cdef str _short(object value):
    if value is None or len(value) <= 32:
        return repr(value)
    return repr(value[:32]) + f"...({len(value)} bytes)"


cdef inline Record _new_record(int64_t offset, int64_t timestamp, int8_t ts_type, object key,
                               object value, tuple headers, int32_t sequence, bint control):
    cdef Record r = Record.__new__(Record)
    r.offset = offset
    r.timestamp = timestamp
    r._timestamp_type = ts_type
    r.key = key
    r.value = value
    r.headers = headers
    r.sequence = sequence
    r.is_control = control
    return r


cdef inline object _bytes_or_none(const uint8_t *base, int32_t off, int32_t length):
    if length < 0:
        return None
    return PyBytes_FromStringAndSize(<const char *>base + off, length)


include "_batch.pxi"
include "_columnar.pxi"
include "_builder.pxi"
include "_append.pxi"
