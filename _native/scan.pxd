# Shared declarations of engine._native.scan: the held buffer every native reader works on,
# the scan row array and the native error conversion.
cimport numpy as cnp
from cpython.buffer cimport Py_buffer
from libc.stdint cimport uint8_t

from batch cimport eng_error


cdef class BufferView:
    cdef Py_buffer view
    cdef bint held
    cdef readonly object obj
    cdef const uint8_t *ptr
    cdef readonly Py_ssize_t nbytes


cdef inline BufferView _view(object data):
    if type(data) is BufferView:
        return <BufferView>data
    return BufferView(data)


cdef cnp.dtype _HEADER_DESCR

cdef cnp.ndarray _new_headers(size_t count)
cdef int _raise_error(const eng_error *err) except -1
