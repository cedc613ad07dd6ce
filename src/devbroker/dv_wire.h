/* dv_wire.h -- how the dev broker writes a delivered message, including the
 * wire cases a test can ask for (dv_faults): GZIP bodies in zlib or gzip
 * framing, MD5/CRC32/SHA1 digests, wrong digests, decompression bombs,
 * messages without id, handle or topic, frames that do not decode; and a
 * message carrying every field (the control port's `publish`).
 *
 * Pure: bytes in, bytes out, no grpc, so the fuzz targets can call it.
 */
#ifndef DV_WIRE_H
#define DV_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dv_command.h"

#define DV_BOMB_BYTES ((size_t)65 * 1024 * 1024)   /* past the 64 MiB a client accepts */

typedef struct dv_delivery {   /* what the store knows about one delivery */
    const uint8_t *wire;       /* the Message as stored, packed */
    size_t wire_len;
    const char *handle;
    const char *store_host;
    int64_t store_ms;
    int attempts, queue_id;
    int64_t offset;
} dv_delivery;

typedef struct dv_wire_stats { uint64_t gzip, corrupt, bomb, malformed, truncated; } dv_wire_stats;

/* The packed ReceiveMessageResponse{message} for d as f asks (rolls from
 * *seed); malloc'd, length in *len. NULL if the stored Message does not decode. */
uint8_t *dv_wire_delivery(const dv_delivery *d, const dv_faults *f, unsigned *seed, size_t *len,
                          dv_wire_stats *st);

/* Upper-case hex digest of data as the Java client computes it (CRC32 without
 * leading zeros, as Long.toHexString). out holds at least 41 bytes. */
void dv_digest_hex(dv_digest type, const uint8_t *data, size_t n, char *out);

/* zlib-compresses in (framing 1: gzip header); malloc'd, 0 or -1. */
int dv_compress(const uint8_t *in, size_t n, int gzip_framing, uint8_t **out, size_t *outlen);

/* A packed Message with every field set (README, `publish`); malloc'd. */
uint8_t *dv_wire_full_message(const char *topic, const char *id, int64_t now_ms, int64_t deliver_ms,
                              size_t *len);

#endif /* DV_WIRE_H */
