# Shared declarations of engine._native.codecs (decode, columnar and builder call these).
from libc.stdint cimport int64_t, uint8_t


cpdef object decompress(int codec, object data, Py_ssize_t limit=*, int magic=*,
                        int64_t position=*, int64_t offset=*)
cpdef bytes compress(int codec, object data, int level=*)
cdef object _codec_shown(int codec)


cdef class Scratch:
    cdef uint8_t *data
    cdef size_t cap
    cdef Py_ssize_t length

    cdef int reserve(self, size_t n, size_t keep=*) except -1


cdef Scratch take_scratch()
cdef int give_scratch(Scratch s) except -1
cdef object decompress_section(int codec, object raw, const uint8_t *p, Py_ssize_t n,
                               Scratch s, Py_ssize_t limit, int magic, int64_t position,
                               int64_t offset, const uint8_t **out, size_t *out_len)
