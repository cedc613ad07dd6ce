/* dv_wire.c -- a delivered message as the proxy writes it, and the wire cases
 * on demand (see dv_wire.h). The body_digest always covers the body bytes as
 * sent (compressed ones included), as the proxy computes it over the stored
 * body; only `corrupt_digest` makes it wrong. */
#include "dv_wire.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "mql.h"

typedef Apache__Rocketmq__V2__SystemProperties sysprops;

static int roll(unsigned *seed, double p) {
    return p > 0 && (double)rand_r(seed) / RAND_MAX < p;
}

void dv_digest_hex(dv_digest type, const uint8_t *data, size_t n, char *out) {
    static const char hex[] = "0123456789ABCDEF";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0, i;
    if (type == DV_DIGEST_CRC32) {
        uLong crc = crc32(0L, Z_NULL, 0);
        while (n > 0) {   /* crc32 takes a uInt length */
            uInt chunk = n > 1u << 30 ? 1u << 30 : (uInt)n;
            crc = crc32(crc, data, chunk);
            data += chunk;
            n -= chunk;
        }
        snprintf(out, 41, "%lX", (unsigned long)crc);
        return;
    }
    EVP_Digest(data, n, md, &len, type == DV_DIGEST_SHA1 ? EVP_sha1() : EVP_md5(), NULL);
    for (i = 0; i < len; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[2 * len] = '\0';
}

/* Deflates n bytes of in -- or, with in NULL, n zero bytes -- to a new buffer. */
static int deflate_all(const uint8_t *in, size_t n, int window_bits, uint8_t **out, size_t *outlen) {
    static const uint8_t zeros[65536];
    z_stream z;
    size_t cap = n / 64 + 1024, left = n;
    int rc = Z_OK;
    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, 9, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    *out = mql_xmalloc(cap);
    while (rc != Z_STREAM_END) {
        size_t chunk = left > sizeof(zeros) ? sizeof(zeros) : left;
        if (z.avail_in == 0) {
            z.next_in = (Bytef *)(in ? in + (n - left) : zeros);
            z.avail_in = (uInt)(in ? (left > (1u << 30) ? 1u << 30 : left) : chunk);
            left -= z.avail_in;
        }
        if (z.total_out == cap) {
            cap *= 2;
            *out = realloc(*out, cap);
            if (!*out) abort();
        }
        z.next_out = *out + z.total_out;
        z.avail_out = (uInt)(cap - z.total_out);
        rc = deflate(&z, left == 0 && z.avail_in == 0 ? Z_FINISH : Z_NO_FLUSH);
        if (rc == Z_STREAM_ERROR) {
            deflateEnd(&z);
            free(*out);
            return -1;
        }
        if (rc == Z_BUF_ERROR) rc = Z_OK;   /* no progress possible: grow and go on */
    }
    *outlen = z.total_out;
    deflateEnd(&z);
    return 0;
}

int dv_compress(const uint8_t *in, size_t n, int gzip_framing, uint8_t **out, size_t *outlen) {
    if (!gzip_framing) {   /* the zlib stream a remoting producer writes */
        uLongf cap = compressBound(n);
        *out = mql_xmalloc(cap);
        if (compress2(*out, &cap, in, n, Z_BEST_COMPRESSION) != Z_OK) {
            free(*out);
            return -1;
        }
        *outlen = cap;
        return 0;
    }
    return deflate_all(in ? in : (const uint8_t *)"", n, 15 + 16, out, outlen);
}

/* Sets body (owned by *owned) and encoding for the gzip and bomb cases. */
static void encode_body(Apache__Rocketmq__V2__Message *m, const dv_faults *f, unsigned *seed,
                        uint8_t **owned, dv_wire_stats *st) {
    size_t n;
    sysprops *sp = m->system_properties;
    if (roll(seed, f->bomb)) {
        if (deflate_all(NULL, DV_BOMB_BYTES, f->gzip_framing ? 31 : 15, owned, &n) < 0) return;
        st->bomb++;
    } else if (roll(seed, f->gzip)) {
        if (dv_compress(m->body.data, m->body.len, f->gzip_framing, owned, &n) < 0) return;
        st->gzip++;
    } else {
        return;
    }
    m->body.data = *owned;
    m->body.len = n;
    sp->body_encoding = APACHE__ROCKETMQ__V2__ENCODING__GZIP;
}

static const char *malformed_kind(const dv_faults *f, uint64_t count) {
    static const char *kinds[] = {"id", "handle", "topic"};
    if (f->malformed_kind != DV_MALFORMED_ANY) return kinds[f->malformed_kind - 1];
    return kinds[count % 3];
}

uint8_t *dv_wire_delivery(const dv_delivery *d, const dv_faults *f, unsigned *seed, size_t *len,
                          dv_wire_stats *st) {
    Apache__Rocketmq__V2__Message *m = (void *)protobuf_c_message_unpack(
        &apache__rocketmq__v2__message__descriptor, NULL, d->wire_len, d->wire);
    Apache__Rocketmq__V2__ReceiveMessageResponse resp = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    sysprops local = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT, saved, *sp;
    Apache__Rocketmq__V2__Digest digest = APACHE__ROCKETMQ__V2__DIGEST__INIT;
    Google__Protobuf__Timestamp stored = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Apache__Rocketmq__V2__Resource *topic;
    ProtobufCBinaryData body;
    uint8_t *owned = NULL, *out;
    char hex[48];
    if (!m) return NULL;
    sp = m->system_properties ? m->system_properties : &local;
    saved = *sp;
    body = m->body;
    topic = m->topic;
    m->system_properties = sp;
    encode_body(m, f, seed, &owned, st);
    dv_digest_hex(f->digest, m->body.data, m->body.len, hex);
    if (roll(seed, f->corrupt_digest)) {
        hex[0] = hex[0] == '0' ? '1' : '0';   /* one wrong digit */
        st->corrupt++;
    }
    digest.type = f->digest == DV_DIGEST_CRC32  ? APACHE__ROCKETMQ__V2__DIGEST_TYPE__CRC32
                  : f->digest == DV_DIGEST_SHA1 ? APACHE__ROCKETMQ__V2__DIGEST_TYPE__SHA1
                                                : APACHE__ROCKETMQ__V2__DIGEST_TYPE__MD5;
    digest.checksum = hex;   /* clients dereference it unconditionally */
    stored.seconds = d->store_ms / 1000;
    stored.nanos = (int32_t)(d->store_ms % 1000) * 1000000;
    sp->receipt_handle = (char *)d->handle;
    sp->store_host = (char *)d->store_host;
    sp->body_digest = &digest;
    sp->store_timestamp = &stored;
    sp->delivery_attempt = d->attempts;
    sp->queue_id = d->queue_id;
    sp->queue_offset = d->offset;
    if (roll(seed, f->malformed)) {
        const char *k = malformed_kind(f, st->malformed++);
        if (strcmp(k, "id") == 0) sp->message_id = "";
        else if (strcmp(k, "handle") == 0) sp->receipt_handle = "";
        else m->topic = NULL;
    }
    resp.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_MESSAGE;
    resp.message = m;
    *len = protobuf_c_message_get_packed_size(&resp.base);
    out = mql_xmalloc(*len);
    protobuf_c_message_pack(&resp.base, out);
    if (*len >= 4 && roll(seed, f->truncated_frame)) {
        *len /= 2;   /* the message field now claims more bytes than follow */
        st->truncated++;
    }
    /* give the unpacked tree its own pointers back before freeing it */
    *sp = saved;
    m->body = body;
    m->topic = topic;
    if (sp == &local) m->system_properties = NULL;
    protobuf_c_message_free_unpacked(&m->base, NULL);
    free(owned);
    return out;
}

/* The values README documents for `publish`: every field a handler may read,
 * with a user property that is not UTF-8 -- more than one real message would
 * carry (a group and a delivery time together), which is the point. */
uint8_t *dv_wire_full_message(const char *topic, const char *id, int64_t now_ms, int64_t deliver_ms,
                              size_t *len) {
    Apache__Rocketmq__V2__Message m = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    Apache__Rocketmq__V2__Resource res = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    sysprops sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Google__Protobuf__Timestamp born = GOOGLE__PROTOBUF__TIMESTAMP__INIT,
                                deliver = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Apache__Rocketmq__V2__Message__UserPropertiesEntry p1 =
        APACHE__ROCKETMQ__V2__MESSAGE__USER_PROPERTIES_ENTRY__INIT,
        p2 = APACHE__ROCKETMQ__V2__MESSAGE__USER_PROPERTIES_ENTRY__INIT, *props[2] = {&p1, &p2};
    static char *keys[] = {"dv-key-1", "dv-key-2"};
    static char bytes[] = "\xff\xfe not utf-8 \xc3\x28";
    static char body[] = "dv publish body";
    uint8_t *out;
    res.name = (char *)topic;
    m.topic = &res;
    p1.key = "dv-utf8";
    p1.value.data = (uint8_t *)(uintptr_t)"h\xc3\xa9llo \xe2\x9c\x93";
    p1.value.len = strlen((const char *)p1.value.data);
    p2.key = "dv-bytes";
    p2.value.data = (uint8_t *)bytes;   /* values are bytes in our proto subset */
    p2.value.len = sizeof(bytes) - 1;
    m.n_user_properties = 2;
    m.user_properties = props;
    born.seconds = (now_ms - 1000) / 1000;
    born.nanos = (int32_t)((now_ms - 1000) % 1000) * 1000000;
    deliver.seconds = deliver_ms / 1000;
    deliver.nanos = (int32_t)(deliver_ms % 1000) * 1000000;
    sp.tag = "dv-tag";
    sp.n_keys = 2;
    sp.keys = keys;
    sp.message_id = (char *)id;
    sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__FIFO;
    sp.born_timestamp = &born;
    sp.born_host = "dv-born-host";
    sp.delivery_timestamp = &deliver;
    sp.message_group = "dv-group";
    sp.trace_context = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    m.system_properties = &sp;
    m.body.data = (uint8_t *)body;
    m.body.len = sizeof(body) - 1;
    *len = protobuf_c_message_get_packed_size(&m.base);
    out = mql_xmalloc(*len);
    protobuf_c_message_pack(&m.base, out);
    return out;
}
