# Shared declarations of engine._native.codecs (decode, columnar and builder call these).
from libc.stdint cimport int64_t


cpdef object decompress(int codec, object data, Py_ssize_t limit=*, int magic=*,
                        int64_t position=*, int64_t offset=*)
cpdef bytes compress(int codec, object data, int level=*)
cdef object _codec_shown(int codec)
