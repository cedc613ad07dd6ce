/* mql_body.h -- a delivered body made fit for a handler: digest, then encoding.
 *
 * What the official clients do (rocketmq-clients, Java MessageViewImpl): the
 * digest the proxy sends (body_digest: CRC32, MD5 or SHA1, hex text) is checked
 * against the body *as it came over the wire*, then a GZIP body is inflated.
 * The 5.x proxy says GZIP for whatever the remoting producer compressed, which
 * is a zlib stream; we take both framings, told apart by the first bytes as
 * the Java client does (Utilities.decompressBytes: 1f 8b is gzip).
 * Inflation stops at a caller-given limit so a small hostile body cannot
 * exhaust memory (a "decompression bomb").
 *
 * Pure functions: no allocation survives a failure, nothing global.
 */
#ifndef MQL_BODY_H
#define MQL_BODY_H

#include <stddef.h>
#include <stdint.h>

/* The default for the max_body option: 64 MiB after inflation. */
#define MQL_MAX_BODY_DEFAULT ((size_t)64 << 20)

typedef enum mql_body_status {
    MQL_BODY_OK = 0,
    MQL_BODY_DIGEST_MISMATCH,   /* the digest does not match the wire bytes */
    MQL_BODY_INFLATE_FAILED,    /* GZIP that is not a whole zlib/gzip stream */
    MQL_BODY_TOO_LARGE,         /* more than max_body bytes (inflated or not) */
    MQL_BODY_UNKNOWN_ENCODING   /* an encoding we cannot undo */
} mql_body_status;

/* The stable reason word counters and logs use ("digest_mismatch", ...). */
const char *mql_body_status_name(mql_body_status s);

/* 1 when the checksum (hex text, any case) matches data under the digest type
 * (apache.rocketmq.v2.DigestType: 1 CRC32, 2 MD5, 3 SHA1), else 0. Type 0
 * (none) and types this build does not know count as a match: the official
 * Java client logs and accepts them too. */
int mql_digest_matches(int type, const char *checksum, const uint8_t *data, size_t len);

/* Inflates a zlib- or gzip-framed stream into a new buffer (*out, owned by the
 * caller, *out_len bytes; *out is non-NULL even for an empty result), as the
 * Java client does: gzip members that follow one another are all inflated
 * (GZIPInputStream), bytes after the last member that are no member header
 * are ignored, and so is anything after a zlib stream (InflaterInputStream).
 * MQL_BODY_TOO_LARGE past max bytes (all members together),
 * MQL_BODY_INFLATE_FAILED on a damaged or truncated stream or a member after
 * a valid header that does not inflate; on failure *out is NULL. */
mql_body_status mql_body_inflate(const uint8_t *in, size_t len, size_t max,
                                 uint8_t **out, size_t *out_len);

/* The whole step for one message: verify the digest on the wire bytes, then
 * undo the encoding (apache.rocketmq.v2.Encoding: 0 unspecified and 1 IDENTITY
 * are taken as they are, 2 GZIP is inflated). On MQL_BODY_OK *out holds a new
 * buffer the caller frees. */
mql_body_status mql_body_decode(int encoding, int digest_type, const char *checksum,
                                const uint8_t *in, size_t len, size_t max,
                                uint8_t **out, size_t *out_len);

#endif /* MQL_BODY_H */
