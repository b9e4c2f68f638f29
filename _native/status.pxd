# C declarations of the native statuses (_native/include/status.h): the one list of what a
# kernel can report, each turned into its typed error by engine._native.errors.
from libc.stdint cimport int64_t


cdef extern from "status.h" nogil:
    enum:
        ENG_OK
        ENG_ERR_CORRUPT
        ENG_ERR_INVALID
        ENG_ERR_NOMEM
        ENG_ERR_LIMIT
        ENG_ERR_CODEC
        ENG_ERR_INDEX_FULL
        ENG_ERR_INVALID_OFFSET
        ENG_ERR_ARGUMENT
        ENG_ERR_UNAVAILABLE
        ENG_ERR_OS

    ctypedef struct eng_error:
        int code
        int64_t position
        int64_t offset
        char message[192]
