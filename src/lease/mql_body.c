/* mql_body.c -- digest check and inflation of a delivered body (see mql_body.h).
 * zlib does the inflating and the CRC32, OpenSSL the MD5 and SHA1. */
#include "mql_body.h"

#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "mql.h"

enum { DIGEST_CRC32 = 1, DIGEST_MD5 = 2, DIGEST_SHA1 = 3 };
enum { ENCODING_UNSPECIFIED = 0, ENCODING_IDENTITY = 1, ENCODING_GZIP = 2 };

const char *mql_body_status_name(mql_body_status s) {
    switch (s) {
    case MQL_BODY_OK: return "ok";
    case MQL_BODY_DIGEST_MISMATCH: return "digest_mismatch";
    case MQL_BODY_INFLATE_FAILED: return "inflate_failed";
    case MQL_BODY_TOO_LARGE: return "body_too_large";
    case MQL_BODY_UNKNOWN_ENCODING: return "unknown_encoding";
    }
    return "unknown";
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The Java client writes CRC32 as Long.toHexString: no leading zeros. We
 * compare the value, so a zero-padded or lower-case text matches as well. */
static int crc32_matches(const char *checksum, const uint8_t *data, size_t len) {
    uint32_t want = 0;
    size_t n = 0;
    unsigned long got = crc32_z(0L, data, len);
    if (!*checksum) return 0;
    while (*checksum == '0' && checksum[1]) checksum++;
    for (; *checksum; checksum++, n++) {
        int v = hexval(*checksum);
        if (v < 0 || n >= 8) return 0;
        want = (want << 4) | (uint32_t)v;
    }
    return want == (uint32_t)got;
}

/* MD5 and SHA1: hex of the whole digest; the proxy sends upper case, we take either. */
static int evp_matches(const EVP_MD *md, const char *checksum, const uint8_t *data, size_t len) {
    unsigned char dig[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0, i;
    if (strlen(checksum) != (size_t)EVP_MD_get_size(md) * 2) return 0;
    if (!EVP_Digest(data, len, dig, &dlen, md, NULL)) return 0;
    for (i = 0; i < dlen; i++) {
        int hi = hexval(checksum[2 * i]), lo = hexval(checksum[2 * i + 1]);
        if (hi < 0 || lo < 0 || (unsigned)((hi << 4) | lo) != dig[i]) return 0;
    }
    return 1;
}

int mql_digest_matches(int type, const char *checksum, const uint8_t *data, size_t len) {
    if (!checksum) checksum = "";
    switch (type) {
    case DIGEST_CRC32: return crc32_matches(checksum, data, len);
    case DIGEST_MD5: return evp_matches(EVP_md5(), checksum, data, len);
    case DIGEST_SHA1: return evp_matches(EVP_sha1(), checksum, data, len);
    default: return 1;
    }
}

/* Room for the next inflate call: double, never past limit (max + 1, so that
 * one byte more than max is seen and refused). */
static size_t grow(size_t cap, size_t limit) {
    size_t next = cap > limit / 2 ? limit : cap * 2;
    return next > limit ? limit : next;
}

static mql_body_status inflate_into(z_stream *zs, const uint8_t *in, size_t len, size_t limit,
                                    uint8_t **buf, size_t *used) {
    size_t cap = len < 512 ? 1024 : (len > limit / 4 ? limit : len * 4), fed = 0;
    if (cap > limit) cap = limit;
    *buf = mql_xmalloc(cap);
    for (;;) {
        uInt room;
        int rc;
        if (*used == cap) {
            if (cap >= limit) return MQL_BODY_TOO_LARGE;
            cap = grow(cap, limit);
            *buf = realloc(*buf, cap);
            if (!*buf) abort();
        }
        if (zs->avail_in == 0 && fed < len) {
            uInt chunk = len - fed > UINT_MAX ? UINT_MAX : (uInt)(len - fed);
            zs->next_in = (Bytef *)(uintptr_t)(in + fed);
            zs->avail_in = chunk;
            fed += chunk;
        }
        room = cap - *used > UINT_MAX ? UINT_MAX : (uInt)(cap - *used);
        zs->next_out = *buf + *used;
        zs->avail_out = room;
        rc = inflate(zs, Z_NO_FLUSH);
        *used += room - zs->avail_out;
        if (rc == Z_STREAM_END) {
            if (*used >= limit) return MQL_BODY_TOO_LARGE;
            if (zs->avail_in == 0 && fed == len) return MQL_BODY_OK;
            /* More input after a member: the next member (RFC 1952 2.2; Java's
             * GZIPInputStream reads them all). Bytes that are no stream fail
             * below: the body is refused whole, never delivered in part. */
            if (inflateReset(zs) != Z_OK) return MQL_BODY_INFLATE_FAILED;
            continue;
        }
        if (rc == Z_OK) continue;
        if (rc == Z_BUF_ERROR && zs->avail_out == 0) continue;
        return MQL_BODY_INFLATE_FAILED;   /* damaged, or input ended before the stream did */
    }
}

mql_body_status mql_body_inflate(const uint8_t *in, size_t len, size_t max,
                                 uint8_t **out, size_t *out_len) {
    z_stream zs;
    size_t used = 0, limit = max >= SIZE_MAX - 1 ? SIZE_MAX - 1 : max + 1;
    uint8_t *buf = NULL;
    mql_body_status st;
    *out = NULL;
    *out_len = 0;
    memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, 15 + 32) != Z_OK) return MQL_BODY_INFLATE_FAILED;  /* zlib or gzip header */
    st = inflate_into(&zs, in, len, limit, &buf, &used);
    inflateEnd(&zs);
    if (st != MQL_BODY_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *out_len = used;
    return MQL_BODY_OK;
}

mql_body_status mql_body_decode(int encoding, int digest_type, const char *checksum,
                                const uint8_t *in, size_t len, size_t max,
                                uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (!mql_digest_matches(digest_type, checksum, in, len)) return MQL_BODY_DIGEST_MISMATCH;
    switch (encoding) {
    case ENCODING_UNSPECIFIED:
    case ENCODING_IDENTITY:
        if (len > max) return MQL_BODY_TOO_LARGE;
        *out = mql_xmalloc(len);
        if (len) memcpy(*out, in, len);
        *out_len = len;
        return MQL_BODY_OK;
    case ENCODING_GZIP:
        return mql_body_inflate(in, len, max, out, out_len);
    default:
        return MQL_BODY_UNKNOWN_ENCODING;
    }
}
