/*
 * The leader-append kernels: offset assignment over scan rows, and writing batches to a file
 * with each v2 batch's baseOffset and partitionLeaderEpoch taken from its row.
 *
 * Both fields lie outside the CRC-32C range of a v2 batch ([21, end)), so rewriting them
 * needs no new checksum. The input bytes are never modified: the writer sends a 16-byte
 * stamped prefix (baseOffset, length, partitionLeaderEpoch) and then the rest of each batch
 * through one pwritev, so nothing is copied in user space. POSIX only.
 */
#ifndef ENGINE_APPEND_H
#define ENGINE_APPEND_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"

/* Status of eng_assign_offsets. */
enum {
    ENG_ASSIGN_OK = 0,
    ENG_ASSIGN_NOT_V2 = 1,        /* a row with magic != 2 */
    ENG_ASSIGN_BAD_DELTA = 2,     /* lastOffset - baseOffset outside [0, INT32_MAX] */
    ENG_ASSIGN_OVERFLOW = 3       /* the next offset would pass INT64_MAX */
};

/*
 * Gives rows[0..n) consecutive offsets from next_offset (each keeps its offset span) and the
 * partition leader epoch `epoch`. Rows are checked first; on failure nothing is changed and
 * *failed is the row. On success *next receives the offset after the last row.
 */
int eng_assign_offsets(eng_batch_header *rows, size_t n, int64_t next_offset, int32_t epoch,
                       int64_t *next, size_t *failed);

/*
 * Writes buf[0, len) at file offset `position` of fd, with bytes [0, 8) and [12, 16) of each
 * v2 batch taken from its row's base_offset and partition_leader_epoch (big-endian). Rows must
 * tile buf exactly from 0 (each row's size matching the length field in buf). Retries short
 * writes and EINTR. Returns 0, ENG_PWRITE_NOT_TILED when the rows do not tile buf or position
 * is negative (*written 0, nothing written), or an errno value (*written then holds the bytes
 * written before the failure).
 */
enum { ENG_PWRITE_NOT_TILED = -1 };
int eng_pwrite_batches(int fd, const uint8_t *buf, size_t len, const eng_batch_header *rows,
                       size_t n, int64_t position, size_t *written);

#endif
