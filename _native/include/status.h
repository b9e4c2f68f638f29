/*
 * The statuses of the native core: what went wrong, named once for C and Cython alike.
 *
 * Kernels report one of these (in eng_error.code, or as a return value); the Cython layer
 * turns it into the typed error named beside it in one place, engine._native.errors
 * (`raise_status` / `raise_eng_error`), so a status means the same error in every module.
 * Kernels with finer statuses of their own (the index and append kernels) map each to one
 * of these where they are raised.
 */
#ifndef ENGINE_STATUS_H
#define ENGINE_STATUS_H

#include <stdint.h>

enum {
    ENG_OK = 0,
    ENG_ERR_CORRUPT = 1,        /* CorruptRecordError: damaged bytes (framing, CRC) */
    ENG_ERR_INVALID = 2,        /* InvalidRecordError: intact bytes that break the format */
    ENG_ERR_NOMEM = 3,          /* MemoryError */
    ENG_ERR_LIMIT = 4,          /* RecordSizeLimitError: beyond a size the output can hold */
    ENG_ERR_CODEC = 5,          /* UnsupportedCompressionTypeError */
    ENG_ERR_INDEX_FULL = 6,     /* IndexFullError */
    ENG_ERR_INVALID_OFFSET = 7, /* InvalidOffsetError: an index append out of order */
    ENG_ERR_ARGUMENT = 8,       /* ValueError: an argument no data could make valid */
    ENG_ERR_UNAVAILABLE = 9,    /* ImplementationUnavailableError */
    ENG_ERR_OS = 10,            /* OSError of an errno value */
};

/* The first problem a kernel found, with where it found it. */
typedef struct {
    int code;
    int64_t position; /* byte position in the scanned buffer, -1 if unknown */
    int64_t offset;   /* Kafka offset, -1 if unknown */
    char message[192];
} eng_error;

#endif
