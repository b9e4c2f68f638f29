/*
 * Large growable output buffers for columnar decode.
 *
 * Decoded columns are written once into fresh memory, so page faults (one per 4 KiB page,
 * each with the kernel zeroing it) cost as much as the decode itself. On Linux, buffers of
 * 2 MiB and more are anonymous mappings advised for transparent huge pages and grown with
 * mremap (no copy); elsewhere they are plain malloc/realloc.
 */
#ifndef ENGINE_BIGBUF_H
#define ENGINE_BIGBUF_H

#include <stddef.h>

/* Returns a block of at least *cap bytes (updating *cap), or NULL. */
void *eng_big_alloc(size_t *cap);
/* Grows p (old_cap bytes, content preserved) to at least *cap bytes, or returns NULL
 * leaving p untouched. */
void *eng_big_realloc(void *p, size_t old_cap, size_t *cap);
void eng_big_free(void *p, size_t cap);

#endif
