# Shared declarations of engine._native.errors: the one place a native status (status.pxd)
# becomes a typed error. Every module raises through these.
from status cimport eng_error


cdef object error_for(int status, str message=*, object position=*, object offset=*,
                      object file=*, int errnum=*)
cdef int raise_status(int status, str message=*, object position=*, object offset=*,
                      object file=*, int errnum=*) except -1
cdef int raise_eng_error(const eng_error *err) except -1
