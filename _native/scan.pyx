# distutils: sources = [_native/src/batch.c, _native/src/crc32c.c]
# cython: language_level=3
"""Kafka log entries, scanned: one nogil pass over a buffer to a numpy array of batch headers.

Byte layouts are documented in `_native/include/batch.h` and Kafka's DefaultRecordBatch /
LegacyRecord. `BufferView` holds the buffer export (bytes, bytearray, memoryview, mmap,
numpy) that every native reader works on without the GIL; objects built over it keep the
buffer alive.
"""

cimport numpy as cnp
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.ref cimport Py_INCREF

from batch cimport eng_batch_header, eng_scan_count, eng_scan_fill
from engine._native.errors cimport raise_eng_error
from status cimport ENG_OK, eng_error

import numpy as np

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    # numpy's .pxd leaves it out because it steals a reference to the descriptor
    object _PyArray_NewFromDescr "PyArray_NewFromDescr" (
        void *subtype, cnp.dtype descr, int nd, cnp.npy_intp *dims, cnp.npy_intp *strides,
        void *data, int flags, object obj)


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
_HEADER_DESCR = BATCH_HEADER_DTYPE


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

    @property
    def address(self):
        """Where the held buffer starts in memory: valid while this view lives (for code
        outside Python that reads the bytes there, such as the broker plugin's Java side)."""
        return <size_t>self.ptr


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
        raise_eng_error(&err)
    cdef cnp.ndarray headers = _new_headers(count)
    cdef eng_batch_header *out = <eng_batch_header *>cnp.PyArray_DATA(headers)
    with nogil:
        eng_scan_fill(v.ptr, count, verify_crc, out)
    return headers, valid
