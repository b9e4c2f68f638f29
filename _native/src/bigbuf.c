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

/*
 * Recently freed mappings are kept (up to CACHE_BYTES) and handed out again: decoded
 * columns are typically consumed and dropped chunk after chunk, and a reused mapping has its
 * pages already faulted in, which saves the kernel zeroing them anew (a quarter of a
 * columnar decode's time on fresh memory). Contents are stale, never read before written.
 */
#include <pthread.h>

#define CACHE_SLOTS 8
#define CACHE_BYTES ((size_t)256 << 20)

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static void *cache_ptr[CACHE_SLOTS];
static size_t cache_cap[CACHE_SLOTS];
static size_t cache_total;

static void *cache_take(size_t *cap)
{
    void *p = NULL;
    int best = -1;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; i++) {
        /* big enough, and not wastefully bigger */
        if (cache_ptr[i] && cache_cap[i] >= *cap && cache_cap[i] <= 4 * *cap &&
            (best < 0 || cache_cap[i] < cache_cap[best]))
            best = i;
    }
    if (best >= 0) {
        p = cache_ptr[best];
        *cap = cache_cap[best];
        cache_total -= cache_cap[best];
        cache_ptr[best] = NULL;
    }
    pthread_mutex_unlock(&cache_lock);
    return p;
}

static int cache_put(void *p, size_t cap)
{
    int kept = 0;
    pthread_mutex_lock(&cache_lock);
    if (cache_total + cap <= CACHE_BYTES) {
        for (int i = 0; i < CACHE_SLOTS; i++) {
            if (!cache_ptr[i]) {
                cache_ptr[i] = p;
                cache_cap[i] = cap;
                cache_total += cap;
                kept = 1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return kept;
}

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
    void *p = cache_take(cap);
    return p ? p : map_big(*cap);
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
    q = cache_take(cap);
    if (q == NULL)
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
    if (cap >= BIG_THRESHOLD) {
        if (!cache_put(p, cap))
            munmap(p, cap);
    }
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
