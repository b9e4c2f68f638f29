/* Leader-append kernels (see append.h). */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "append.h"
#include "kbytes.h"

#if !defined(_WIN32)
#include <sys/uio.h>
#include <unistd.h>
#endif

int eng_assign_offsets(eng_batch_header *rows, size_t n, int64_t next_offset, int32_t epoch,
                       int64_t *next, size_t *failed)
{
    int64_t cursor = next_offset;
    size_t i;
    for (i = 0; i < n; i++) {
        /* last/base offsets come from untrusted bytes: subtract in unsigned arithmetic */
        int64_t delta = (int64_t)((uint64_t)rows[i].last_offset - (uint64_t)rows[i].base_offset);
        if (rows[i].magic != 2) { *failed = i; return ENG_ASSIGN_NOT_V2; }
        if (delta < 0 || delta > INT32_MAX) { *failed = i; return ENG_ASSIGN_BAD_DELTA; }
        if (cursor < 0 || cursor > INT64_MAX - delta - 1) { *failed = i; return ENG_ASSIGN_OVERFLOW; }
        cursor += delta + 1;
    }
    cursor = next_offset;
    for (i = 0; i < n; i++) {
        int64_t delta = rows[i].last_offset - rows[i].base_offset;
        rows[i].base_offset = cursor;
        rows[i].last_offset = cursor + delta;
        rows[i].partition_leader_epoch = epoch;
        cursor += delta + 1;
    }
    *next = cursor;
    return ENG_ASSIGN_OK;
}

#if defined(_WIN32)

int eng_pwrite_batches(int fd, const uint8_t *buf, size_t len, const eng_batch_header *rows,
                       size_t n, int64_t position, size_t *written)
{
    (void)fd; (void)buf; (void)len; (void)rows; (void)n; (void)position;
    *written = 0;
    return ENOSYS;
}

#else

/* Batches stamped per pwritev call: two iovecs each, plus a trailing one, under IOV_MAX. */
#define GROUP 256
#define PREFIX 16

/* Writes iov[0..cnt) at *position, advancing over short writes. */
static int write_all(int fd, struct iovec *iov, int cnt, int64_t *position, size_t *written)
{
    while (cnt > 0) {
        ssize_t r = pwritev(fd, iov, cnt, (off_t)*position);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) return EIO;
        *position += r;
        *written += (size_t)r;
        size_t left = (size_t)r;
        while (cnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

int eng_pwrite_batches(int fd, const uint8_t *buf, size_t len, const eng_batch_header *rows,
                       size_t n, int64_t position, size_t *written)
{
    uint8_t prefix[GROUP][PREFIX];
    struct iovec iov[2 * GROUP + 1];
    size_t i, end = 0;
    *written = 0;
    if (position < 0) return ENG_PWRITE_NOT_TILED;
    for (i = 0; i < n; i++) {
        if (rows[i].position < 0 || (size_t)rows[i].position != end
                || rows[i].size < ENG_HEADER_SIZE_UP_TO_MAGIC
                || (size_t)rows[i].size > len - end
                || (int64_t)kb_load_i32(buf + end + 8) + ENG_LOG_OVERHEAD != rows[i].size)
            return ENG_PWRITE_NOT_TILED;
        end += (size_t)rows[i].size;
    }
    if (end != len) return ENG_PWRITE_NOT_TILED;

    const uint8_t *plain = buf; /* start of the bytes not yet queued */
    int cnt = 0, g = 0;
    for (i = 0; i < n; i++) {
        const uint8_t *e = buf + rows[i].position;
        if (rows[i].magic == 2 && (kb_load_i64(e) != rows[i].base_offset
                                   || kb_load_i32(e + 12) != rows[i].partition_leader_epoch)) {
            if (e > plain) {
                iov[cnt].iov_base = (void *)plain;
                iov[cnt++].iov_len = (size_t)(e - plain);
            }
            kb_store_u64(prefix[g], (uint64_t)rows[i].base_offset);
            memcpy(prefix[g] + 8, e + 8, 4);
            kb_store_u32(prefix[g] + 12, (uint32_t)rows[i].partition_leader_epoch);
            iov[cnt].iov_base = prefix[g++];
            iov[cnt++].iov_len = PREFIX;
            plain = e + PREFIX;
        }
        if (g == GROUP) {
            /* flush everything queued up to the end of this batch */
            const uint8_t *batch_end = e + rows[i].size;
            iov[cnt].iov_base = (void *)plain;
            iov[cnt++].iov_len = (size_t)(batch_end - plain);
            plain = batch_end;
            int rc = write_all(fd, iov, cnt, &position, written);
            if (rc) return rc;
            cnt = 0;
            g = 0;
        }
    }
    if (buf + len > plain) {
        iov[cnt].iov_base = (void *)plain;
        iov[cnt++].iov_len = (size_t)(buf + len - plain);
    }
    if (cnt == 0) return 0;
    return write_all(fd, iov, cnt, &position, written);
}

#endif
