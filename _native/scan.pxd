# Shared declarations of engine._native.scan: the held buffer every native reader works on
# and the scan row array.
cimport numpy as cnp
from cpython.buffer cimport Py_buffer
from libc.stdint cimport uint8_t


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
