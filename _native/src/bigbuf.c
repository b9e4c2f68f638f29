/* See bigbuf.h. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* mremap */
#endif
#include "bigbuf.h"

#include <stdlib.h>
#include <string.h>

#define BIG_THRESHOLD ((size_t)2 << 20)

#if defined(__linux__)
#include <sys/mman.h>

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static void *map_big(size_t cap)
{
    void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, cap, MADV_HUGEPAGE);
#endif
    return p;
}

void *eng_big_alloc(size_t *cap)
{
    if (*cap < BIG_THRESHOLD)
        return malloc(*cap ? *cap : 1);
    *cap = round_up(*cap, BIG_THRESHOLD);
    return map_big(*cap);
}

void *eng_big_realloc(void *p, size_t old_cap, size_t *cap)
{
    void *q;
    if (p == NULL)
        return eng_big_alloc(cap);
    if (*cap < BIG_THRESHOLD)
        return realloc(p, *cap);
    *cap = round_up(*cap, BIG_THRESHOLD);
    if (old_cap >= BIG_THRESHOLD) {
        q = mremap(p, old_cap, *cap, MREMAP_MAYMOVE);
        if (q == MAP_FAILED)
            return NULL;
#ifdef MADV_HUGEPAGE
        madvise(q, *cap, MADV_HUGEPAGE);
#endif
        return q;
    }
    q = map_big(*cap);
    if (q == NULL)
        return NULL;
    memcpy(q, p, old_cap);
    free(p);
    return q;
}

void eng_big_free(void *p, size_t cap)
{
    if (p == NULL)
        return;
    if (cap >= BIG_THRESHOLD)
        munmap(p, cap);
    else
        free(p);
}

#else

void *eng_big_alloc(size_t *cap) { return malloc(*cap ? *cap : 1); }
void *eng_big_realloc(void *p, size_t old_cap, size_t *cap)
{
    (void)old_cap;
    return realloc(p, *cap ? *cap : 1);
}
void eng_big_free(void *p, size_t cap) { (void)cap; free(p); }

#endif
