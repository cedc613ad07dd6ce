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

/* ---- inflation ----
 *
 * Read as the official Java client reads a GZIP body (rocketmq-clients,
 * Utilities.decompressBytes, by the first bytes): 1f 8b is gzip, read with
 * java.util.zip.GZIPInputStream; anything else is taken as a zlib stream
 * (Java's InflaterInputStream, chosen there by 0x78), which is what the 5.x
 * proxy labels GZIP when a remoting producer compressed the body. What
 * follows the end of a zlib stream is never read. A gzip body is read member
 * by member as GZIPInputStream.readTrailer does: after a member's trailer it
 * looks for another member header only when more than 26 bytes are left in
 * its 512-byte input buffer or more wait beyond the buffer; when it looks and
 * finds no valid header, the rest is ignored, and when it finds one, that
 * member must inflate like the first. So a body is accepted or refused
 * exactly where the Java client accepts or refuses it. */

#define GZIP_FHCRC 0x02
#define GZIP_FEXTRA 0x04
#define GZIP_FNAME 0x08
#define GZIP_FCOMMENT 0x10
#define JAVA_GZIP_BUFFER 512   /* GZIPInputStream(InputStream)'s input buffer */
#define JAVA_GZIP_LOOK 26      /* readTrailer: trailer 8 + least header 10 + trailer 8 */

/* The output so far: all members go into one buffer, under one limit. */
typedef struct inflated {
    uint8_t *buf;
    size_t used, cap;
    size_t limit;   /* max + 1, so that one byte more than max is seen and refused */
} inflated;

/* Room for the next inflate call: double, never past the limit. */
static int make_room(inflated *o) {
    if (o->used < o->cap) return 1;
    if (o->cap >= o->limit) return 0;
    o->cap = o->cap > o->limit / 2 ? o->limit : o->cap * 2;
    o->buf = realloc(o->buf, o->cap);
    if (!o->buf) abort();
    return 1;
}

/* Inflates one stream from in[0..len) (zs knows its framing) into o, up to
 * its end; *consumed is how many input bytes it took. */
static mql_body_status inflate_stream(z_stream *zs, const uint8_t *in, size_t len, inflated *o,
                                      size_t *consumed) {
    size_t fed = 0;
    zs->avail_in = 0;
    for (;;) {
        uInt room;
        int rc;
        if (!make_room(o)) return MQL_BODY_TOO_LARGE;
        if (zs->avail_in == 0 && fed < len) {
            uInt chunk = len - fed > UINT_MAX ? UINT_MAX : (uInt)(len - fed);
            zs->next_in = (Bytef *)(uintptr_t)(in + fed);
            zs->avail_in = chunk;
            fed += chunk;
        }
        room = o->cap - o->used > UINT_MAX ? UINT_MAX : (uInt)(o->cap - o->used);
        zs->next_out = o->buf + o->used;
        zs->avail_out = room;
        rc = inflate(zs, Z_NO_FLUSH);
        o->used += room - zs->avail_out;
        if (rc == Z_STREAM_END) {
            *consumed = fed - zs->avail_in;
            return o->used >= o->limit ? MQL_BODY_TOO_LARGE : MQL_BODY_OK;
        }
        if (rc == Z_OK) continue;
        if (rc == Z_BUF_ERROR && zs->avail_out == 0) continue;
        return MQL_BODY_INFLATE_FAILED;   /* damaged, or input ended before the stream did */
    }
}

/* The length of the gzip member header at in[0..len) (RFC 1952 2.3), or 0
 * when GZIPInputStream.readHeader would throw: magic, method 8 (deflate), the
 * optional fields present in full, the header CRC right when flagged. Like
 * readHeader it does not look at the reserved flag bits (zlib refuses them). */
static size_t gzip_header(const uint8_t *in, size_t len) {
    size_t n = 10;
    const uint8_t *z;
    uint8_t flg;
    if (len < n || in[0] != 0x1f || in[1] != 0x8b || in[2] != 8) return 0;
    flg = in[3];
    if (flg & GZIP_FEXTRA) {
        if (len < n + 2) return 0;
        n += 2 + (size_t)(in[n] | in[n + 1] << 8);
        if (n > len) return 0;
    }
    if (flg & GZIP_FNAME) {
        if (!(z = memchr(in + n, 0, len - n))) return 0;
        n = (size_t)(z - in) + 1;
    }
    if (flg & GZIP_FCOMMENT) {
        if (!(z = memchr(in + n, 0, len - n))) return 0;
        n = (size_t)(z - in) + 1;
    }
    if (flg & GZIP_FHCRC) {
        if (len < n + 2 || (crc32_z(0L, in, n) & 0xffff) != (unsigned)(in[n] | in[n + 1] << 8)) return 0;
        n += 2;
    }
    return n;
}

/* The member trailer at t (8 bytes): CRC32 and length mod 2^32 of its output. */
static int gzip_trailer_matches(const uint8_t *t, const uint8_t *out, size_t n) {
    uint32_t crc = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
    uint32_t isize = (uint32_t)t[4] | (uint32_t)t[5] << 8 | (uint32_t)t[6] << 16 | (uint32_t)t[7] << 24;
    return crc == (uint32_t)crc32_z(0L, out, n) && isize == (uint32_t)n;
}

/* Whether readTrailer looks for another member after the trailer at q: the
 * bytes its buffer (filled 512 at a time, up to chunk_end) still holds, and
 * whether more wait beyond it. */
static int java_looks_further(size_t q, size_t chunk_end, size_t len) {
    size_t read = chunk_end > q + 8 ? chunk_end : q + 8;
    return len > read || chunk_end - q > JAVA_GZIP_LOOK;
}

static mql_body_status inflate_gzip(z_stream *zs, const uint8_t *in, size_t len, inflated *o) {
    size_t pos = gzip_header(in, len), chunk_end = pos;
    if (!pos || inflateInit2(zs, -15) != Z_OK) return MQL_BODY_INFLATE_FAILED;   /* raw deflate */
    for (;;) {
        size_t start = o->used, consumed = 0, q, next;
        mql_body_status st = inflate_stream(zs, in + pos, len - pos, o, &consumed);
        if (st != MQL_BODY_OK) return st;
        q = pos + consumed;
        if (len - q < 8 || !gzip_trailer_matches(in + q, o->buf + start, o->used - start))
            return MQL_BODY_INFLATE_FAILED;   /* "Corrupt GZIP trailer", or cut short */
        while (chunk_end < q) chunk_end = len - chunk_end > JAVA_GZIP_BUFFER ? chunk_end + JAVA_GZIP_BUFFER : len;
        if (!java_looks_further(q, chunk_end, len)) return MQL_BODY_OK;
        next = gzip_header(in + q + 8, len - q - 8);
        if (!next) return MQL_BODY_OK;        /* no member header: the rest is ignored */
        pos = q + 8 + next;
        if (chunk_end < pos) chunk_end = pos;   /* the header was read past the buffer */
        if (inflateReset(zs) != Z_OK) return MQL_BODY_INFLATE_FAILED;
    }
}

static mql_body_status inflate_zlib(z_stream *zs, const uint8_t *in, size_t len, inflated *o) {
    size_t consumed;
    if (inflateInit2(zs, 15) != Z_OK) return MQL_BODY_INFLATE_FAILED;
    return inflate_stream(zs, in, len, o, &consumed);   /* what follows it is never read */
}

mql_body_status mql_body_inflate(const uint8_t *in, size_t len, size_t max,
                                 uint8_t **out, size_t *out_len) {
    z_stream zs;
    inflated o;
    mql_body_status st;
    *out = NULL;
    *out_len = 0;
    memset(&zs, 0, sizeof(zs));
    o.limit = max >= SIZE_MAX - 1 ? SIZE_MAX - 1 : max + 1;
    o.cap = len < 512 ? 1024 : (len > o.limit / 4 ? o.limit : len * 4);
    if (o.cap > o.limit) o.cap = o.limit;
    o.buf = mql_xmalloc(o.cap);
    o.used = 0;
    if (len >= 2 && in[0] == 0x1f && in[1] == 0x8b) st = inflate_gzip(&zs, in, len, &o);
    else st = inflate_zlib(&zs, in, len, &o);
    inflateEnd(&zs);
    if (st != MQL_BODY_OK) {
        free(o.buf);
        return st;
    }
    *out = o.buf;
    *out_len = o.used;
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
