/* body_test.c -- mql_body without a server: digests against published
 * vectors, inflation of both framings, and the failures that must stay
 * per-message (truncated stream, a bomb past the limit, an empty body). */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "mql_body.h"
#include "mql_test.h"

static const uint8_t HELLO_ZLIB[] = {0x78, 0x9c, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0x07,
                                     0x00, 0x06, 0x2c, 0x02, 0x15};

/* windowBits 15 = zlib framing, 15 + 16 = gzip framing */
static size_t deflate_with(int window_bits, const uint8_t *in, size_t len, uint8_t *out, size_t cap) {
    z_stream zs;
    size_t n;
    memset(&zs, 0, sizeof(zs));
    deflateInit2(&zs, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.avail_in = (uInt)len;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    deflate(&zs, Z_FINISH);
    n = zs.total_out;
    deflateEnd(&zs);
    return n;
}

static void verifies_crc32_as_the_java_client_writes_it(void) {
    const uint8_t *s = (const uint8_t *)"123456789";
    CHECK(mql_digest_matches(1, "CBF43926", s, 9));
    CHECK(mql_digest_matches(1, "cbf43926", s, 9));
    CHECK(!mql_digest_matches(1, "CBF43927", s, 9));
    CHECK(!mql_digest_matches(1, "", s, 9));
    CHECK(!mql_digest_matches(1, "CBF43926 ", s, 9));
    CHECK(!mql_digest_matches(1, "1CBF43926", s, 9));
    /* Long.toHexString drops leading zeros; a padded text means the same value */
    CHECK(mql_digest_matches(1, "3E0D52A", (const uint8_t *)"m21", 3));
    CHECK(mql_digest_matches(1, "03e0d52a", (const uint8_t *)"m21", 3));
    CHECK(mql_digest_matches(1, "0", (const uint8_t *)"", 0));
}

static void verifies_md5_and_sha1_in_either_case(void) {
    CHECK(mql_digest_matches(2, "D41D8CD98F00B204E9800998ECF8427E", (const uint8_t *)"", 0));
    CHECK(mql_digest_matches(2, "d41d8cd98f00b204e9800998ecf8427e", (const uint8_t *)"", 0));
    CHECK(!mql_digest_matches(2, "D41D8CD98F00B204E9800998ECF8427F", (const uint8_t *)"", 0));
    CHECK(!mql_digest_matches(2, "D41D8CD98F00B204E9800998ECF8427", (const uint8_t *)"", 0));
    CHECK(!mql_digest_matches(2, "", (const uint8_t *)"", 0));
    CHECK(!mql_digest_matches(2, NULL, (const uint8_t *)"", 0));
    CHECK(mql_digest_matches(3, "A9993E364706816ABA3E25717850C26C9CD0D89D", (const uint8_t *)"abc", 3));
    CHECK(!mql_digest_matches(3, "A9993E364706816ABA3E25717850C26C9CD0D89E", (const uint8_t *)"abc", 3));
    CHECK(!mql_digest_matches(3, "ZZ993E364706816ABA3E25717850C26C9CD0D89D", (const uint8_t *)"abc", 3));
}

static void takes_a_missing_or_unknown_digest_type_as_unverified(void) {
    CHECK(mql_digest_matches(0, "", (const uint8_t *)"abc", 3));
    CHECK(mql_digest_matches(9, "whatever", (const uint8_t *)"abc", 3));
}

static void inflates_a_known_zlib_stream(void) {
    uint8_t *out;
    size_t n;
    CHECK(mql_body_inflate(HELLO_ZLIB, sizeof(HELLO_ZLIB), 100, &out, &n) == MQL_BODY_OK);
    CHECK(n == 5 && out && memcmp(out, "hello", 5) == 0);
    free(out);
}

static void inflates_zlib_and_gzip_framing_alike(void) {
    static uint8_t text[10240], packed[20000];
    uint8_t *out;
    size_t n, plen, i;
    int framing;
    for (i = 0; i < sizeof(text); i++) text[i] = (uint8_t)("the quick brown fox "[i % 20]);
    for (framing = 0; framing < 2; framing++) {
        plen = deflate_with(framing ? 15 + 16 : 15, text, sizeof(text), packed, sizeof(packed));
        CHECK(plen > 0 && plen < 1000);
        CHECK(mql_body_decode(2, 0, NULL, packed, plen, MQL_MAX_BODY_DEFAULT, &out, &n) == MQL_BODY_OK);
        CHECK(n == sizeof(text) && out && memcmp(out, text, n) == 0);
        free(out);
    }
}

static void refuses_a_truncated_or_damaged_stream(void) {
    uint8_t *out = (uint8_t *)1, bad[sizeof(HELLO_ZLIB)];
    size_t n = 7;
    CHECK(mql_body_inflate(HELLO_ZLIB, sizeof(HELLO_ZLIB) - 5, 100, &out, &n) == MQL_BODY_INFLATE_FAILED);
    CHECK(out == NULL && n == 0);
    memcpy(bad, HELLO_ZLIB, sizeof(bad));
    bad[sizeof(bad) - 1] ^= 0xff;   /* the adler32 trailer */
    CHECK(mql_body_inflate(bad, sizeof(bad), 100, &out, &n) == MQL_BODY_INFLATE_FAILED);
    CHECK(mql_body_inflate((const uint8_t *)"plain text", 10, 100, &out, &n) == MQL_BODY_INFLATE_FAILED);
}

/* gzip (RFC 1952 2.2) allows members one after another, and Java's
 * GZIPInputStream reads them all (the JDK's own "concatenated members").
 * Issue 20 item 8: only the first was inflated and the rest dropped without a
 * word, so a handler got part of the body as if it were all of it. Every
 * member is inflated now, a member after a valid header that does not
 * inflate refuses the whole body (never part of it), and the size limit
 * counts all members. */
static void inflates_every_member_of_a_multi_member_body(void) {
    uint8_t packed[256], *out = (uint8_t *)1;
    size_t a, b, n = 1;
    a = deflate_with(15 + 16, (const uint8_t *)"hello ", 6, packed, sizeof(packed));
    b = deflate_with(15 + 16, (const uint8_t *)"world", 5, packed + a, sizeof(packed) - a);
    CHECK(a > 0 && b > 0);
    CHECK(mql_body_decode(2, 0, NULL, packed, a + b, 100, &out, &n) == MQL_BODY_OK);
    CHECK(n == 11 && out && memcmp(out, "hello world", 11) == 0);
    free(out);
    /* the limit holds over the whole body, not per member */
    out = (uint8_t *)1;
    CHECK(mql_body_decode(2, 0, NULL, packed, a + b, 8, &out, &n) == MQL_BODY_TOO_LARGE);
    CHECK(out == NULL && n == 0);
    /* a second member cut short: refused */
    b = deflate_with(15 + 16, (const uint8_t *)"world", 5, packed + a, sizeof(packed) - a);
    CHECK(mql_body_decode(2, 0, NULL, packed, a + b - 3, 100, &out, &n) == MQL_BODY_INFLATE_FAILED);
    CHECK(out == NULL && n == 0);
}

/* Inflates in[0..len) and says whether it gave exactly want. */
static int inflates_to(const uint8_t *in, size_t len, const char *want) {
    uint8_t *out = NULL;
    size_t n = 0;
    int same = mql_body_decode(2, 0, NULL, in, len, 1000, &out, &n) == MQL_BODY_OK &&
               n == strlen(want) && memcmp(out, want, n) == 0;
    free(out);
    return same;
}

static int refused(const uint8_t *in, size_t len) {
    uint8_t *out = (uint8_t *)1;
    size_t n = 1;
    return mql_body_decode(2, 0, NULL, in, len, 1000, &out, &n) == MQL_BODY_INFLATE_FAILED &&
           out == NULL && n == 0;
}

/* Issue 33 item 5: bytes after a gzip member that are no member used to
 * refuse the body (dead-lettered), where the Java client delivers it:
 * GZIPInputStream.readTrailer ignores what does not read as a member header,
 * and InflaterInputStream never reads past the end of a zlib stream. */
static void ignores_bytes_after_the_last_member_that_are_no_member_header(void) {
    static const uint8_t fhcrc_wrong[] = {0x1f, 0x8b, 8, 0x02, 0, 0, 0, 0, 0, 0xff, 0xde, 0xad};
    uint8_t packed[256];
    size_t a = deflate_with(15 + 16, (const uint8_t *)"hello ", 6, packed, sizeof(packed)), b;
    memcpy(packed + a, "trailing", 8);                         /* short: never looked at */
    CHECK(inflates_to(packed, a + 8, "hello "));
    memset(packed + a, 'x', 40);                               /* long: looked at, no header */
    CHECK(inflates_to(packed, a + 40, "hello "));
    memcpy(packed + a, HELLO_ZLIB, sizeof(HELLO_ZLIB));        /* a zlib stream is no member */
    CHECK(inflates_to(packed, a + sizeof(HELLO_ZLIB), "hello "));
    memcpy(packed + a, fhcrc_wrong, sizeof(fhcrc_wrong));      /* a header whose CRC is wrong */
    memset(packed + a + sizeof(fhcrc_wrong), 0, 20);
    CHECK(inflates_to(packed, a + sizeof(fhcrc_wrong) + 20, "hello "));
    /* after a zlib stream nothing is read, not even a gzip member */
    memcpy(packed, HELLO_ZLIB, sizeof(HELLO_ZLIB));
    memcpy(packed + sizeof(HELLO_ZLIB), "trailing bytes of any length at all", 35);
    CHECK(inflates_to(packed, sizeof(HELLO_ZLIB) + 35, "hello"));
    b = deflate_with(15 + 16, (const uint8_t *)"world", 5, packed + sizeof(HELLO_ZLIB), 200);
    CHECK(inflates_to(packed, sizeof(HELLO_ZLIB) + b, "hello"));
}

/* A member header is what GZIPInputStream.readHeader takes, which does not
 * look at the reserved flag bits (zlib's own gzip reader refuses them). */
static void reads_a_member_whose_header_java_takes(void) {
    uint8_t packed[256];
    size_t a = deflate_with(15 + 16, (const uint8_t *)"hello ", 6, packed, sizeof(packed));
    size_t b = deflate_with(15 + 16, (const uint8_t *)"world", 5, packed + a, sizeof(packed) - a);
    packed[a + 3] |= 0xe0;
    CHECK(inflates_to(packed, a + b, "hello world"));
    packed[3] |= 0xe0;
    CHECK(inflates_to(packed, a + b, "hello world"));
}

/* readTrailer looks for a next member only when more than 26 bytes are left
 * in its 512-byte buffer or more wait beyond it: 15 bytes after a short
 * member are never looked at, the same 15 bytes split by the buffer's edge
 * are, and a valid header there with no whole member after it refuses the
 * body. */
static void looks_for_a_member_where_javas_buffer_makes_it_look(void) {
    static const uint8_t tail[15] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0x03, 0x00, 1, 2, 3};
    static uint8_t data[600], packed[1200];
    uint32_t x = 12345;
    uint8_t *out = NULL;
    size_t i, n = 0, len, plen = 0;
    for (i = 0; i < sizeof(data); i++) data[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 24);
    plen = deflate_with(15 + 16, (const uint8_t *)"hello ", 6, packed, sizeof(packed));
    memcpy(packed + plen, tail, sizeof(tail));
    CHECK(inflates_to(packed, plen + sizeof(tail), "hello "));
    /* a member whose trailer starts at 512: the buffer (bytes 10 to 522) holds
     * the trailer and 2 bytes of the tail, 13 more wait beyond it */
    for (len = 400; len < sizeof(data); len++)
        if ((plen = deflate_with(15 + 16, data, len, packed, sizeof(packed))) == 520) break;
    CHECK(plen == 520);
    CHECK(mql_body_decode(2, 0, NULL, packed, plen, 1000, &out, &n) == MQL_BODY_OK);
    CHECK(n == len && memcmp(out, data, len) == 0);
    free(out);
    memcpy(packed + plen, tail, sizeof(tail));
    CHECK(refused(packed, plen + sizeof(tail)));
}

static void stops_a_bomb_at_the_limit(void) {
    uint8_t *zeros = calloc(1 << 22, 1), packed[8192], *out = (uint8_t *)1;
    size_t plen = deflate_with(15, zeros, 1 << 22, packed, sizeof(packed)), n = 1;
    CHECK(plen > 0 && plen < sizeof(packed));
    CHECK(mql_body_inflate(packed, plen, 65536, &out, &n) == MQL_BODY_TOO_LARGE);
    CHECK(out == NULL && n == 0);
    CHECK(mql_body_decode(2, 0, NULL, packed, plen, (1 << 22) - 1, &out, &n) == MQL_BODY_TOO_LARGE);
    CHECK(mql_body_decode(2, 0, NULL, packed, plen, 1 << 22, &out, &n) == MQL_BODY_OK);
    CHECK(n == (size_t)1 << 22);
    free(out);
    free(zeros);
}

static void handles_empty_bodies(void) {
    uint8_t *out, packed[64];
    size_t n, plen;
    CHECK(mql_body_decode(1, 2, "D41D8CD98F00B204E9800998ECF8427E", (const uint8_t *)"", 0, 10, &out, &n) ==
          MQL_BODY_OK);
    CHECK(out != NULL && n == 0);
    free(out);
    /* GZIP with no bytes at all is not a stream; GZIP of nothing is */
    CHECK(mql_body_decode(2, 0, NULL, (const uint8_t *)"", 0, 10, &out, &n) == MQL_BODY_INFLATE_FAILED);
    plen = deflate_with(15, (const uint8_t *)"", 0, packed, sizeof(packed));
    CHECK(mql_body_decode(2, 0, NULL, packed, plen, 10, &out, &n) == MQL_BODY_OK);
    CHECK(out != NULL && n == 0);
    free(out);
}

static void checks_the_digest_on_the_wire_bytes_before_inflating(void) {
    uint8_t *out;
    size_t n;
    char hex[16];
    snprintf(hex, sizeof(hex), "%lX", (unsigned long)crc32(0L, HELLO_ZLIB, sizeof(HELLO_ZLIB)));
    CHECK(mql_body_decode(2, 1, hex, HELLO_ZLIB, sizeof(HELLO_ZLIB), 100, &out, &n) == MQL_BODY_OK);
    free(out);
    snprintf(hex, sizeof(hex), "%lX", (unsigned long)crc32(0L, (const uint8_t *)"hello", 5));
    CHECK(mql_body_decode(2, 1, hex, HELLO_ZLIB, sizeof(HELLO_ZLIB), 100, &out, &n) ==
          MQL_BODY_DIGEST_MISMATCH);
    CHECK(out == NULL);
}

static void refuses_identity_past_the_limit_and_unknown_encodings(void) {
    uint8_t *out;
    size_t n;
    CHECK(mql_body_decode(1, 0, NULL, (const uint8_t *)"abcdef", 6, 5, &out, &n) == MQL_BODY_TOO_LARGE);
    CHECK(mql_body_decode(7, 0, NULL, (const uint8_t *)"abcdef", 6, 50, &out, &n) ==
          MQL_BODY_UNKNOWN_ENCODING);
    CHECK(strcmp(mql_body_status_name(MQL_BODY_DIGEST_MISMATCH), "digest_mismatch") == 0);
    CHECK(strcmp(mql_body_status_name(MQL_BODY_TOO_LARGE), "body_too_large") == 0);
}

int main(void) {
    RUN(verifies_crc32_as_the_java_client_writes_it);
    RUN(verifies_md5_and_sha1_in_either_case);
    RUN(takes_a_missing_or_unknown_digest_type_as_unverified);
    RUN(inflates_a_known_zlib_stream);
    RUN(inflates_zlib_and_gzip_framing_alike);
    RUN(refuses_a_truncated_or_damaged_stream);
    RUN(inflates_every_member_of_a_multi_member_body);
    RUN(ignores_bytes_after_the_last_member_that_are_no_member_header);
    RUN(reads_a_member_whose_header_java_takes);
    RUN(looks_for_a_member_where_javas_buffer_makes_it_look);
    RUN(stops_a_bomb_at_the_limit);
    RUN(handles_empty_bodies);
    RUN(checks_the_digest_on_the_wire_bytes_before_inflating);
    RUN(refuses_identity_past_the_limit_and_unknown_encodings);
    return TEST_REPORT("body");
}
