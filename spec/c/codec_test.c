/* codec_test.c -- ReceiveMessage and Telemetry frames judged without a server:
 * every system property copied, good / corrupted / malformed told apart, and
 * hostile times saturated instead of overflowing; and a unary reply's unpack
 * kept within its budget. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "mql_body.h"
#include "mql_codec.h"
#include "mql_inbound.h"
#include "mql_test.h"

typedef struct fixture {
    Apache__Rocketmq__V2__ReceiveMessageResponse resp;
    Apache__Rocketmq__V2__Message msg;
    Apache__Rocketmq__V2__Resource topic;
    Apache__Rocketmq__V2__SystemProperties sp;
    Apache__Rocketmq__V2__Digest digest;
    Google__Protobuf__Timestamp born, store, delivery;
    Apache__Rocketmq__V2__Message__UserPropertiesEntry p1, p2, *props[2];
    char *keys[2];
} fixture;

static void fixture_init(fixture *fx, const char *body) {
    apache__rocketmq__v2__receive_message_response__init(&fx->resp);
    apache__rocketmq__v2__message__init(&fx->msg);
    apache__rocketmq__v2__resource__init(&fx->topic);
    apache__rocketmq__v2__system_properties__init(&fx->sp);
    apache__rocketmq__v2__digest__init(&fx->digest);
    google__protobuf__timestamp__init(&fx->born);
    google__protobuf__timestamp__init(&fx->store);
    google__protobuf__timestamp__init(&fx->delivery);
    apache__rocketmq__v2__message__user_properties_entry__init(&fx->p1);
    apache__rocketmq__v2__message__user_properties_entry__init(&fx->p2);
    fx->resp.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_MESSAGE;
    fx->resp.message = &fx->msg;
    fx->topic.name = "T1";
    fx->msg.topic = &fx->topic;
    fx->msg.system_properties = &fx->sp;
    fx->msg.body.data = (uint8_t *)(uintptr_t)body;
    fx->msg.body.len = strlen(body);
    fx->p1.key = "city";
    fx->p1.value.data = (uint8_t *)(uintptr_t)"Zürich";
    fx->p1.value.len = strlen("Zürich");
    fx->p2.key = "nul";
    fx->p2.value.data = (uint8_t *)(uintptr_t)"a\0b\xff";   /* a NUL and a non-UTF-8 byte */
    fx->p2.value.len = 4;
    fx->props[0] = &fx->p1;
    fx->props[1] = &fx->p2;
    fx->msg.user_properties = fx->props;
    fx->msg.n_user_properties = 2;
    fx->keys[0] = "k1";
    fx->keys[1] = "k 2";
    fx->sp.keys = fx->keys;
    fx->sp.n_keys = 2;
    fx->sp.message_id = "01ABC";
    fx->sp.receipt_handle = "0 1 2 3 4 b 6 7 8";
    fx->sp.tag = "TagA";
    fx->sp.message_group = "g1";
    fx->sp.trace_context = "00-abc-def-01";
    fx->sp.born_host = "10.0.0.1";
    fx->sp.store_host = "10.0.0.2:10911";
    fx->sp.message_type = 2;
    fx->sp.delivery_attempt = 3;
    fx->sp.queue_id = 5;
    fx->sp.queue_offset = 12345678901LL;
    fx->born.seconds = 1700000000;
    fx->born.nanos = 250000000;
    fx->store.seconds = 1700000001;
    fx->delivery.seconds = 1700000060;
    fx->sp.born_timestamp = &fx->born;
    fx->sp.store_timestamp = &fx->store;
    fx->sp.delivery_timestamp = &fx->delivery;
    fx->sp.body_encoding = 1;
    fx->digest.type = 2;
    fx->sp.body_digest = NULL;
}

static void decode(mql_frame *f, const ProtobufCMessage *m, size_t max_body) {
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    protobuf_c_message_pack(m, buf);
    mql_frame_decode(f, buf, n, max_body);
    free(buf);
}

static void copies_every_system_property(void) {
    fixture fx;
    mql_frame f;
    fixture_init(&fx, "hello");
    fx.digest.checksum = "5D41402ABC4B2A76B9719D911017C592";   /* MD5("hello"), as the proxy sends it */
    fx.sp.body_digest = &fx.digest;
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MESSAGE);
    CHECK(strcmp(f.msg.id, "01ABC") == 0 && strcmp(f.msg.topic, "T1") == 0);
    CHECK(strcmp(f.msg.receipt_handle, "0 1 2 3 4 b 6 7 8") == 0);
    CHECK(strcmp(f.msg.tag, "TagA") == 0 && strcmp(f.msg.message_group, "g1") == 0);
    CHECK(strcmp(f.msg.trace_context, "00-abc-def-01") == 0);
    CHECK(strcmp(f.msg.born_host, "10.0.0.1") == 0 && strcmp(f.msg.store_host, "10.0.0.2:10911") == 0);
    CHECK(f.msg.nkeys == 2 && strcmp(f.msg.keys[1], "k 2") == 0);
    CHECK(f.msg.nprops == 2 && strcmp(f.msg.props[0].value, "Zürich") == 0);
    CHECK(f.msg.props[0].value_len == strlen("Zürich"));
    CHECK(strcmp(f.msg.props[1].key, "nul") == 0 && f.msg.props[1].value_len == 4);
    CHECK(memcmp(f.msg.props[1].value, "a\0b\xff", 4) == 0);
    CHECK(f.msg.message_type == 2 && f.msg.delivery_attempt == 3 && f.msg.queue_id == 5);
    CHECK(f.msg.queue_offset == 12345678901LL);
    CHECK(f.msg.born_ms == 1700000000250LL && f.msg.store_ms == 1700000001000LL);
    CHECK(f.msg.delivery_ms == 1700000060000LL);
    CHECK(f.msg.body_len == 5 && memcmp(f.msg.body, "hello", 5) == 0);
    mql_frame_clear(&f);
}

/* SystemProperties.priority is `optional int32 priority = 22` upstream (apis 2.1.x); ours
 * is an unpacked repeated int32 so that priority 0 is written: the bytes must be those of a
 * present singular field, key 22 << 3 | varint = 0xB0 0x01, then the value. */
static void reads_a_priority_and_writes_an_explicit_zero(void) {
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    int32_t zero = 0, big[2] = {2, 300};
    uint8_t buf[16];
    fixture fx;
    mql_frame f;
    sp.n_priority = 1;
    sp.priority = &zero;
    CHECK(protobuf_c_message_get_packed_size(&sp.base) == 3);
    protobuf_c_message_pack(&sp.base, buf);
    CHECK(buf[0] == 0xB0 && buf[1] == 0x01 && buf[2] == 0x00);
    fixture_init(&fx, "hi");
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MESSAGE && !f.msg.has_priority);   /* an older proxy sends none */
    mql_frame_clear(&f);
    fx.sp.n_priority = 2;   /* a reader of the singular field keeps the last one */
    fx.sp.priority = big;
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MESSAGE && f.msg.has_priority && f.msg.priority == 300);
    mql_frame_clear(&f);
    fx.sp.n_priority = 1;
    fx.sp.priority = &zero;
    decode(&f, &fx.resp.base, 100);
    CHECK(f.msg.has_priority && f.msg.priority == 0);
    mql_frame_clear(&f);
}

/* SystemProperties.lite_topic (field 21, apis 2.1.x, RocketMQ 5.5 LITE topics): kept when
 * sent, NULL when not (an older proxy, or a message of another type). */
static void reads_the_lite_topic(void) {
    fixture fx;
    mql_frame f;
    fixture_init(&fx, "hi");
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MESSAGE && f.msg.lite_topic == NULL);
    mql_frame_clear(&f);
    fx.sp.lite_topic = "order-42";
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MESSAGE && f.msg.lite_topic && strcmp(f.msg.lite_topic, "order-42") == 0);
    CHECK(strcmp(f.msg.topic, "T1") == 0);
    mql_frame_clear(&f);
}

static void inflates_a_gzip_body_whose_digest_covers_the_wire_bytes(void) {
    static const char zhello[] = "\x78\x9c\xcb\x48\xcd\xc9\xc9\x07\x00\x06\x2c\x02\x15";
    char hex[16];
    fixture fx;
    mql_frame f;
    fixture_init(&fx, "");
    fx.msg.body.data = (uint8_t *)(uintptr_t)zhello;
    fx.msg.body.len = sizeof(zhello) - 1;
    fx.sp.body_encoding = 2;
    snprintf(hex, sizeof(hex), "%lX", (unsigned long)crc32(0L, (const Bytef *)zhello, sizeof(zhello) - 1));
    fx.digest.type = 1;
    fx.digest.checksum = hex;
    fx.sp.body_digest = &fx.digest;
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MESSAGE);
    CHECK(f.msg.body_len == 5 && memcmp(f.msg.body, "hello", 5) == 0);
    mql_frame_clear(&f);
    decode(&f, &fx.resp.base, 4);   /* five bytes inflated is past a limit of four */
    CHECK(f.kind == MQL_FRAME_CORRUPTED && strcmp(f.reason, "body_too_large") == 0);
    CHECK(f.msg.body == NULL && strcmp(f.msg.id, "01ABC") == 0 && f.msg.receipt_handle != NULL);
    mql_frame_clear(&f);
}

static void calls_a_digest_mismatch_corrupted_and_keeps_what_a_release_needs(void) {
    fixture fx;
    mql_frame f;
    fixture_init(&fx, "hello");
    fx.digest.checksum = "00000000000000000000000000000000";
    fx.sp.body_digest = &fx.digest;
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_CORRUPTED && strcmp(f.reason, "digest_mismatch") == 0);
    CHECK(f.msg.body == NULL && f.msg.body_len == 0);
    CHECK(strcmp(f.msg.id, "01ABC") == 0 && strcmp(f.msg.topic, "T1") == 0);
    CHECK(strcmp(f.msg.receipt_handle, "0 1 2 3 4 b 6 7 8") == 0);
    mql_frame_clear(&f);
}

/* A frame packed with marker in a text field, the marker's first byte then
 * made a NUL: what protobuf-c cannot be given as a C string. */
static void decode_with_nul(mql_frame *f, const ProtobufCMessage *m, const char *marker) {
    size_t n = protobuf_c_message_get_packed_size(m), k = strlen(marker), i;
    uint8_t *buf = malloc(n);
    protobuf_c_message_pack(m, buf);
    for (i = 0; i + k <= n; i++)
        if (memcmp(buf + i, marker, k) == 0) buf[i] = 0;
    mql_frame_decode(f, buf, n, 100);
    free(buf);
}

/* protobuf-c reads a string field as a C string, so a NUL inside one cut it
 * there: the tag "vip\0x" reached the handler as "vip", the property names
 * "city" and "city\0x" as one name (the later value winning). The Java
 * client reads the whole string; the message is corrupted instead of handed
 * over as something it is not, while a NUL in bytes (a property's value, the
 * body) stays data. */
static void calls_a_nul_inside_a_text_field_corrupted(void) {
    static const char *const fields[] = {"tag", "key", "property name", "message group", "topic"};
    size_t i;
    for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        fixture fx;
        mql_frame f;
        fixture_init(&fx, "hello");
        if (i == 0) fx.sp.tag = "vip@x";
        if (i == 1) fx.keys[0] = "k1@x";
        if (i == 2) fx.p2.key = "city@x";
        if (i == 3) fx.sp.message_group = "g1@x";
        if (i == 4) fx.topic.name = "T1@x";
        decode_with_nul(&f, &fx.resp.base, "@x");
        if (f.kind != MQL_FRAME_CORRUPTED) fprintf(stderr, "  a NUL in the %s: not corrupted\n", fields[i]);
        CHECK(f.kind == MQL_FRAME_CORRUPTED && f.reason && strcmp(f.reason, "nul_in_text") == 0);
        CHECK(f.msg.body == NULL && f.msg.receipt_handle != NULL);
        mql_frame_clear(&f);
    }
}

/* A frame whose Message is the fixture's and then extra, raw Message fields
 * appended to it: what no protobuf-c packer makes (thousands of empty map
 * entries, a second system_properties carrying more). */
static void decode_with_extra(mql_frame *f, fixture *fx, const uint8_t *extra, size_t extra_len) {
    size_t n = protobuf_c_message_get_packed_size(&fx->msg.base), len = n + extra_len, hdr = 1;
    uint8_t *buf = malloc(len + 11), *p;
    size_t v;
    buf[0] = 0x12;   /* ReceiveMessageResponse.message, length-prefixed */
    for (v = len; v >= 0x80; v >>= 7) buf[hdr++] = (uint8_t)(v | 0x80);
    buf[hdr++] = (uint8_t)v;
    p = buf + hdr;
    protobuf_c_message_pack(&fx->msg.base, p);
    if (extra_len) memcpy(p + n, extra, extra_len);
    mql_frame_decode(f, buf, hdr + len, 100);
    free(buf);
}

static size_t put_varint(uint8_t *p, size_t v) {
    size_t i = 0;
    for (; v >= 0x80; v >>= 7) p[i++] = (uint8_t)(v | 0x80);
    p[i++] = (uint8_t)v;
    return i;
}

/* n copies of the unit, after a head (a second system_properties' tag and length) */
static uint8_t *repeat_unit(const uint8_t *head, size_t head_len, const uint8_t *unit, size_t unit_len,
                            size_t n, size_t *len) {
    uint8_t *buf = malloc(head_len + unit_len * n), *p = buf + head_len;
    size_t i;
    memcpy(buf, head, head_len);
    for (i = 0; i < n; i++, p += unit_len) memcpy(p, unit, unit_len);
    *len = head_len + unit_len * n;
    return buf;
}

/* Each empty map entry is 2 bytes on the wire and a ProtobufCMessage (and a
 * pointer) once unpacked, so one frame of the channel's ~130 MiB could make
 * protobuf-c allocate gigabytes before anyone looked at the message; the same
 * with empty keys, fields nobody knows, or a packed priority. No RocketMQ
 * stores a message with that many (MQL_FRAME_FIELDS_MAX): such a frame is
 * malformed, judged on its wire bytes, before and instead of being unpacked
 * (the identity of the message is never read: it has none here). */
static void calls_a_message_with_too_many_fields_malformed(void) {
    static const char *const what[] = {"empty properties", "empty keys", "unknown fields", "packed priorities"};
    const size_t n = MQL_FRAME_FIELDS_MAX + 1;   /* each alone past the bound */
    size_t i;
    for (i = 0; i < sizeof(what) / sizeof(what[0]); i++) {
        fixture fx;
        mql_frame f;
        uint8_t head[16], *extra = NULL;
        size_t hl = 0, len = 0;
        fixture_init(&fx, "hello");
        fx.sp.message_id = "";   /* judged before the identity, which needs an unpack */
        if (i == 0) extra = repeat_unit(head, 0, (const uint8_t *)"\x12\x00", 2, n, &len);
        if (i == 1) {   /* system_properties { keys: "" x n }, the fixture's own */
            size_t k;
            fx.sp.keys = malloc(n * sizeof(*fx.sp.keys));
            for (k = 0; k < n; k++) fx.sp.keys[k] = (char *)"";
            fx.sp.n_keys = n;
        }
        if (i == 2) extra = repeat_unit(head, 0, (const uint8_t *)"\x98\x06\x00", 3, n, &len);   /* field 99 */
        if (i == 3) {   /* system_properties { priority: [0 x n] packed }, in place of the fixture's */
            size_t inner = 2 + put_varint(head, n) + n;
            fx.msg.system_properties = NULL;
            head[hl++] = 0x1a;
            hl += put_varint(head + hl, inner);
            head[hl++] = 0xb2;
            head[hl++] = 0x01;
            hl += put_varint(head + hl, n);
            extra = repeat_unit(head, hl, (const uint8_t *)"\x00", 1, n, &len);
        }
        decode_with_extra(&f, &fx, extra, len);
        if (f.kind != MQL_FRAME_MALFORMED || !f.reason || strcmp(f.reason, "too_many_fields") != 0)
            fprintf(stderr, "  %zu %s: kind %d, reason %s\n", n, what[i], (int)f.kind,
                    f.reason ? f.reason : "(none)");
        CHECK(f.kind == MQL_FRAME_MALFORMED && f.reason && strcmp(f.reason, "too_many_fields") == 0);
        CHECK(f.msg.id == NULL && f.msg.props == NULL);
        mql_frame_clear(&f);
        free(extra);
        if (i == 1) free(fx.sp.keys);
    }
}

/* A singular message field sent twice is merged by protobuf-c: each copy is
 * unpacked and merged into the one before, its repeated fields copied into a
 * new array of both sizes. 65,500 copies of system_properties { keys: "" }
 * (4 bytes each, under MQL_FRAME_FIELDS_MAX) re-copied the keys at every
 * size up to 65,500: seconds of CPU for one frame of 262 KB. protobuf-java,
 * the proxy's, writes such a field once, so a frame that repeats one is
 * malformed unread. Three copies show it: the outcome does not depend on how
 * many. */
static void calls_a_frame_repeating_a_singular_message_malformed(void) {
    fixture fx;
    mql_frame f;
    size_t len = 0;
    uint8_t none[1] = {0};
    uint8_t *extra = repeat_unit(none, 0, (const uint8_t *)"\x1a\x02\x12\x00", 4, 3, &len);
    fixture_init(&fx, "hello");
    decode_with_extra(&f, &fx, extra, len);
    CHECK(f.kind == MQL_FRAME_MALFORMED && f.reason && strcmp(f.reason, "repeated_singular_field") == 0);
    CHECK(f.msg.id == NULL);
    mql_frame_clear(&f);
    free(extra);
}

/* The most properties a stored message can have (each costs at least its two
 * separators in a properties string of at most 32,767 bytes) still decode. */
static void takes_the_most_properties_a_broker_stores(void) {
    enum { MOST = 16383 };
    fixture fx;
    mql_frame f;
    Apache__Rocketmq__V2__Message__UserPropertiesEntry *entries = calloc(MOST, sizeof(*entries));
    Apache__Rocketmq__V2__Message__UserPropertiesEntry **props = calloc(MOST, sizeof(*props));
    char (*names)[8] = calloc(MOST, sizeof(*names));
    size_t i;
    fixture_init(&fx, "hello");
    for (i = 0; i < MOST; i++) {
        apache__rocketmq__v2__message__user_properties_entry__init(&entries[i]);
        snprintf(names[i], sizeof(names[i]), "%zx", i);
        entries[i].key = names[i];
        props[i] = &entries[i];
    }
    fx.msg.user_properties = props;
    fx.msg.n_user_properties = MOST;
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MESSAGE && f.msg.nprops == MOST);
    mql_frame_clear(&f);
    free(names);
    free(props);
    free(entries);
}

static void calls_a_message_without_identity_malformed(void) {
    fixture fx;
    mql_frame f;
    fixture_init(&fx, "x");
    fx.sp.message_id = "";
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MALFORMED && strcmp(f.reason, "no_message_id") == 0);
    mql_frame_clear(&f);
    fixture_init(&fx, "x");
    fx.sp.receipt_handle = "";
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MALFORMED && strcmp(f.reason, "no_receipt_handle") == 0);
    mql_frame_clear(&f);
    fixture_init(&fx, "x");
    fx.msg.topic = NULL;
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MALFORMED && strcmp(f.reason, "no_topic") == 0);
    mql_frame_clear(&f);
    fixture_init(&fx, "x");
    fx.msg.system_properties = NULL;
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MALFORMED && strcmp(f.reason, "no_message_id") == 0);
    mql_frame_clear(&f);
}

static void calls_bytes_that_do_not_decode_malformed(void) {
    fixture fx;
    mql_frame f;
    size_t n;
    uint8_t *buf;
    mql_frame_decode(&f, (const uint8_t *)"\xff\xff\xff\xff", 4, 100);
    CHECK(f.kind == MQL_FRAME_MALFORMED && strcmp(f.reason, "undecodable") == 0);
    mql_frame_clear(&f);
    fixture_init(&fx, "a body long enough to cut");
    n = protobuf_c_message_get_packed_size(&fx.resp.base);
    buf = malloc(n);
    protobuf_c_message_pack(&fx.resp.base, buf);
    mql_frame_decode(&f, buf, n - 3, 100);   /* a truncated frame */
    CHECK(f.kind == MQL_FRAME_MALFORMED && strcmp(f.reason, "undecodable") == 0);
    mql_frame_clear(&f);
    free(buf);
}

static void reads_status_and_timestamp_frames(void) {
    Apache__Rocketmq__V2__ReceiveMessageResponse resp = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    Google__Protobuf__Timestamp ts = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    mql_frame f;
    st.code = APACHE__ROCKETMQ__V2__CODE__MESSAGE_NOT_FOUND;
    st.message = "no new message";
    resp.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_STATUS;
    resp.status = &st;
    decode(&f, &resp.base, 100);
    CHECK(f.kind == MQL_FRAME_STATUS && !f.status.ok && strcmp(f.status.code, "MESSAGE_NOT_FOUND") == 0);
    mql_frame_clear(&f);
    resp.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_DELIVERY_TIMESTAMP;
    resp.delivery_timestamp = &ts;
    decode(&f, &resp.base, 100);
    CHECK(f.kind == MQL_FRAME_OTHER);
    mql_frame_clear(&f);
}

static void saturates_wild_timestamps(void) {
    fixture fx;
    mql_frame f;
    fixture_init(&fx, "x");
    fx.born.seconds = INT64_MAX;
    fx.born.nanos = 999999999;
    fx.store.seconds = INT64_MIN;
    fx.store.nanos = -999999999;
    fx.delivery.seconds = INT64_MAX / 1000;
    fx.delivery.nanos = 999999999;
    decode(&f, &fx.resp.base, 100);
    CHECK(f.kind == MQL_FRAME_MESSAGE);
    CHECK(f.msg.born_ms == MQL_MS_MAX && f.msg.store_ms == -MQL_MS_MAX);
    CHECK(f.msg.delivery_ms == MQL_MS_MAX);
    mql_frame_clear(&f);
}

static void reads_a_reconnect_endpoints_command(void) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__ReconnectEndpointsCommand rc = APACHE__ROCKETMQ__V2__RECONNECT_ENDPOINTS_COMMAND__INIT;
    mql_telemetry_reply r;
    uint8_t buf[32];
    size_t n;
    rc.nonce = "n1";
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_RECONNECT_ENDPOINTS_COMMAND;
    cmd.reconnect_endpoints_command = &rc;
    n = protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    CHECK(r.decoded && r.reconnect_endpoints && !r.has_settings && !r.has_status);
    mql_telemetry_clear(&r);
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND__NOT_SET;
    n = protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    CHECK(r.decoded && !r.reconnect_endpoints);
    mql_telemetry_clear(&r);
}

static void reads_telemetry_settings_with_saturated_durations(void) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__Settings s = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    Apache__Rocketmq__V2__Subscription sub = APACHE__ROCKETMQ__V2__SUBSCRIPTION__INIT;
    Apache__Rocketmq__V2__RetryPolicy rp = APACHE__ROCKETMQ__V2__RETRY_POLICY__INIT;
    Apache__Rocketmq__V2__ExponentialBackoff eb = APACHE__ROCKETMQ__V2__EXPONENTIAL_BACKOFF__INIT;
    Google__Protobuf__Duration lp = GOOGLE__PROTOBUF__DURATION__INIT, init = GOOGLE__PROTOBUF__DURATION__INIT,
                               mx = GOOGLE__PROTOBUF__DURATION__INIT;
    mql_telemetry_reply r;
    size_t n;
    uint8_t *buf;
    lp.seconds = 20;
    init.seconds = -5;
    mx.seconds = INT64_MAX;
    eb.initial = &init;
    eb.max = &mx;
    rp.max_attempts = 17;
    rp.strategy_case = APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_EXPONENTIAL_BACKOFF;
    rp.exponential_backoff = &eb;
    sub.long_polling_timeout = &lp;
    sub.receive_batch_size = 32;
    s.backoff_policy = &rp;
    s.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION;
    s.subscription = &sub;
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    cmd.settings = &s;
    n = protobuf_c_message_get_packed_size(&cmd.base);
    buf = malloc(n);
    protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    CHECK(r.decoded && r.has_settings && !r.has_status);
    CHECK(r.long_polling_ms == 20000 && r.receive_batch_size == 32 && r.max_attempts == 17);
    CHECK(r.backoff_initial_ms == 0 && r.backoff_max_ms == MQL_MS_MAX);
    free(buf);
    mql_telemetry_decode(&r, (const uint8_t *)"\x0a\xff", 2, 1 << 20);
    CHECK(!r.decoded);
}

/* Settings of an orderly group: fifo, and the retry policy whole -- every
 * customized step (RocketMQ's default list has 18), kept up to
 * MQL_RETRY_STEPS_MAX; an exponential one with its multiplier, a wild one read as 1. */
static void reads_the_whole_retry_policy_and_fifo(void) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__Settings s = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    Apache__Rocketmq__V2__Subscription sub = APACHE__ROCKETMQ__V2__SUBSCRIPTION__INIT;
    Apache__Rocketmq__V2__RetryPolicy rp = APACHE__ROCKETMQ__V2__RETRY_POLICY__INIT;
    Apache__Rocketmq__V2__CustomizedBackoff cb = APACHE__ROCKETMQ__V2__CUSTOMIZED_BACKOFF__INIT;
    Apache__Rocketmq__V2__ExponentialBackoff eb = APACHE__ROCKETMQ__V2__EXPONENTIAL_BACKOFF__INIT;
    Google__Protobuf__Duration steps[40], *next[40], init = GOOGLE__PROTOBUF__DURATION__INIT,
                                                     mx = GOOGLE__PROTOBUF__DURATION__INIT;
    mql_telemetry_reply r;
    size_t i, n;
    uint8_t *buf;
    for (i = 0; i < 40; i++) {
        google__protobuf__duration__init(&steps[i]);
        steps[i].seconds = (int64_t)(i + 1);
        next[i] = &steps[i];
    }
    cb.n_next = 40;
    cb.next = next;
    rp.max_attempts = 17;
    rp.strategy_case = APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_CUSTOMIZED_BACKOFF;
    rp.customized_backoff = &cb;
    sub.fifo = 1;
    s.backoff_policy = &rp;
    s.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION;
    s.subscription = &sub;
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    cmd.settings = &s;
    n = protobuf_c_message_get_packed_size(&cmd.base);
    buf = malloc(n);
    protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    free(buf);
    CHECK(r.fifo == 1 && r.retry.max_attempts == 17 && r.retry.customized == 1);
    CHECK(r.retry.nsteps == MQL_RETRY_STEPS_MAX);
    CHECK(r.retry.steps_ms[0] == 1000 && r.retry.steps_ms[MQL_RETRY_STEPS_MAX - 1] == MQL_RETRY_STEPS_MAX * 1000);

    init.seconds = 2;
    mx.seconds = 60;
    eb.initial = &init;
    eb.max = &mx;
    eb.multiplier = 3.0f;
    rp.strategy_case = APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_EXPONENTIAL_BACKOFF;
    rp.exponential_backoff = &eb;
    sub.fifo = 0;
    n = protobuf_c_message_get_packed_size(&cmd.base);
    buf = malloc(n);
    protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    free(buf);
    CHECK(r.fifo == 0 && r.retry.customized == 0 && r.retry.nsteps == 0);
    CHECK(r.retry.initial_ms == 2000 && r.retry.max_ms == 60000 && r.retry.multiplier == 3.0);

    eb.multiplier = -1.0f;
    n = protobuf_c_message_get_packed_size(&cmd.base);
    buf = malloc(n);
    protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    free(buf);
    CHECK(r.retry.multiplier == 1.0);
}

/* RecoverOrphanedTransactionCommand: the half message and its transaction id,
 * owned by the reply until mql_telemetry_clear; one without a transaction id
 * or a message id is no orphan, and says why. */
static void reads_an_orphaned_transaction_check(void) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__RecoverOrphanedTransactionCommand o =
        APACHE__ROCKETMQ__V2__RECOVER_ORPHANED_TRANSACTION_COMMAND__INIT;
    Apache__Rocketmq__V2__Message msg = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Apache__Rocketmq__V2__Resource topic = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    mql_telemetry_reply r;
    size_t n;
    uint8_t *buf;
    topic.name = (char *)"orders";
    sp.message_id = (char *)"01AB";
    sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__TRANSACTION;
    sp.body_encoding = APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    msg.topic = &topic;
    msg.system_properties = &sp;
    msg.body.data = (uint8_t *)"half";
    msg.body.len = 4;
    o.message = &msg;
    o.transaction_id = (char *)"tx-1";
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_RECOVER_ORPHANED_TRANSACTION_COMMAND;
    cmd.recover_orphaned_transaction_command = &o;
    n = protobuf_c_message_get_packed_size(&cmd.base);
    buf = malloc(n);
    protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    free(buf);
    CHECK(r.decoded && r.has_orphan && !r.orphan_bad && !r.has_settings);
    CHECK(strcmp(r.orphan_transaction_id, "tx-1") == 0 && strcmp(r.orphan.id, "01AB") == 0);
    CHECK(strcmp(r.orphan.topic, "orders") == 0 && r.orphan.message_type == 4);
    CHECK(r.orphan.body_len == 4 && memcmp(r.orphan.body, "half", 4) == 0);
    mql_telemetry_clear(&r);
    CHECK(!r.has_orphan && r.orphan.id == NULL && r.orphan_transaction_id == NULL);

    o.transaction_id = (char *)"";
    n = protobuf_c_message_get_packed_size(&cmd.base);
    buf = malloc(n);
    protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    free(buf);
    CHECK(!r.has_orphan && r.orphan_bad && strcmp(r.orphan_bad, "no_transaction_id") == 0);
    mql_telemetry_clear(&r);

    o.transaction_id = (char *)"tx-1";
    sp.message_id = (char *)"";
    n = protobuf_c_message_get_packed_size(&cmd.base);
    buf = malloc(n);
    protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    free(buf);
    CHECK(!r.has_orphan && r.orphan_bad && strcmp(r.orphan_bad, "no_message_id") == 0);
    mql_telemetry_clear(&r);

    sp.message_id = (char *)"01AB";
    topic.name = (char *)"orders@x";   /* the '@' made a NUL: "orders\0x", read as "orders" before */
    n = protobuf_c_message_get_packed_size(&cmd.base);
    buf = malloc(n);
    protobuf_c_message_pack(&cmd.base, buf);
    *(uint8_t *)memmem(buf, n, "@x", 2) = 0;
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    free(buf);
    CHECK(!r.has_orphan && r.orphan_bad && strcmp(r.orphan_bad, "nul_in_text") == 0);
    CHECK(r.orphan.id == NULL && r.orphan_transaction_id == NULL);
    mql_telemetry_clear(&r);
}

/* A transaction check carries a Message too, and the same empty entries: the
 * frame is refused unread, as one protobuf-c refuses (decoded 0). */
static void refuses_a_telemetry_frame_with_too_many_fields(void) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__RecoverOrphanedTransactionCommand o =
        APACHE__ROCKETMQ__V2__RECOVER_ORPHANED_TRANSACTION_COMMAND__INIT;
    Apache__Rocketmq__V2__Message msg = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Apache__Rocketmq__V2__Resource topic = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    Apache__Rocketmq__V2__Message__UserPropertiesEntry empty =
        APACHE__ROCKETMQ__V2__MESSAGE__USER_PROPERTIES_ENTRY__INIT;
    const size_t many = 200000;
    Apache__Rocketmq__V2__Message__UserPropertiesEntry **props = malloc(many * sizeof(*props));
    mql_telemetry_reply r;
    size_t n, i;
    uint8_t *buf;
    for (i = 0; i < many; i++) props[i] = &empty;   /* each packs as 2 bytes: tag, length 0 */
    topic.name = (char *)"orders";
    sp.message_id = (char *)"01AB";
    msg.topic = &topic;
    msg.system_properties = &sp;
    msg.user_properties = props;
    msg.n_user_properties = many;
    o.message = &msg;
    o.transaction_id = (char *)"tx-1";
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_RECOVER_ORPHANED_TRANSACTION_COMMAND;
    cmd.recover_orphaned_transaction_command = &o;
    n = protobuf_c_message_get_packed_size(&cmd.base);
    buf = malloc(n);
    protobuf_c_message_pack(&cmd.base, buf);
    mql_telemetry_decode(&r, buf, n, 1 << 20);
    free(buf);
    free(props);
    CHECK(!r.decoded && !r.has_orphan && !r.orphan_bad && r.orphan.props == NULL);
    mql_telemetry_clear(&r);
}

/* msg packed, then unpacked as a reply is (mql_unpack_bytes): NULL if refused */
static void *reply_round_trip(const ProtobufCMessage *msg, size_t *wire_len) {
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n);
    void *got;
    protobuf_c_message_pack(msg, buf);
    got = mql_unpack_bytes(msg->descriptor, buf, n);
    free(buf);
    if (wire_len) *wire_len = n;
    return got;
}

/* A unary reply has no walk before its unpack (a Route of a large cluster
 * may honestly have more fields than a delivered message), so its unpack has
 * a budget of its own: a Route of empty queues, two bytes each on the wire,
 * made protobuf-c allocate a MessageQueue for each (2 million here, about
 * 150 MB; 65 million in the 130 MiB the channel takes). Refused, as any
 * reply that does not decode; an honest Route of 20,000 queues is read. */
static void refuses_a_reply_that_would_decode_past_its_budget(void) {
    Apache__Rocketmq__V2__QueryRouteResponse reply = APACHE__ROCKETMQ__V2__QUERY_ROUTE_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    Apache__Rocketmq__V2__MessageQueue empty = APACHE__ROCKETMQ__V2__MESSAGE_QUEUE__INIT;
    Apache__Rocketmq__V2__MessageQueue full = APACHE__ROCKETMQ__V2__MESSAGE_QUEUE__INIT;
    Apache__Rocketmq__V2__Resource topic = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    Apache__Rocketmq__V2__Broker broker = APACHE__ROCKETMQ__V2__BROKER__INIT;
    Apache__Rocketmq__V2__Endpoints ep = APACHE__ROCKETMQ__V2__ENDPOINTS__INIT;
    Apache__Rocketmq__V2__Address addr = APACHE__ROCKETMQ__V2__ADDRESS__INIT, *addrs[1] = {&addr};
    Apache__Rocketmq__V2__MessageType types[2] = {APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL,
                                                  APACHE__ROCKETMQ__V2__MESSAGE_TYPE__FIFO};
    const size_t hostile = 2000000, honest = 20000;
    Apache__Rocketmq__V2__MessageQueue **queues = malloc(hostile * sizeof(*queues));
    Apache__Rocketmq__V2__QueryRouteResponse *got;
    size_t n, i;
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    st.message = (char *)"OK";
    reply.status = &st;
    reply.message_queues = queues;
    for (i = 0; i < hostile; i++) queues[i] = &empty;   /* each packs as 2 bytes: tag, length 0 */
    reply.n_message_queues = hostile;
    got = reply_round_trip(&reply.base, &n);
    if (got) fprintf(stderr, "  %zu empty queues in %zu bytes decoded\n", got->n_message_queues, n);
    CHECK(got == NULL);
    if (got) protobuf_c_message_free_unpacked(&got->base, NULL);

    topic.name = (char *)"orders-of-a-large-cluster";
    addr.host = (char *)"broker-0123.example.internal";
    addr.port = 10911;
    ep.scheme = APACHE__ROCKETMQ__V2__ADDRESS_SCHEME__DOMAIN_NAME;
    ep.addresses = addrs;
    ep.n_addresses = 1;
    broker.name = (char *)"broker-0123";
    broker.endpoints = &ep;
    full.topic = &topic;
    full.id = 7;
    full.permission = APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE;
    full.broker = &broker;
    full.accept_message_types = types;
    full.n_accept_message_types = 2;
    for (i = 0; i < honest; i++) queues[i] = &full;
    reply.n_message_queues = honest;
    got = reply_round_trip(&reply.base, NULL);
    CHECK(got != NULL && got->n_message_queues == honest);
    CHECK(got && strcmp(got->message_queues[honest - 1]->broker->endpoints->addresses[0]->host,
                        "broker-0123.example.internal") == 0);
    if (got) protobuf_c_message_free_unpacked(&got->base, NULL);
    free(queues);
}

/* The same budget bounds the work of a singular field sent many times in a
 * reply: protobuf-c merges each copy of a queue's broker into the one before,
 * copying the addresses of both into a new array, so 60,000 copies of a
 * broker with one address would copy 1.8 billion pointers. Counted as
 * allocated, the merges pass the budget within a few thousand copies. */
static void stops_merging_a_repeated_singular_field_at_the_budget(void) {
    /* broker (MessageQueue field 4) { endpoints (3) { addresses (2) { host (1): "h" } } } */
    static const uint8_t broker[] = {0x22, 0x07, 0x1a, 0x05, 0x12, 0x03, 0x0a, 0x01, 'h'};
    const size_t copies = 60000;
    size_t inner = copies * sizeof(broker), len = 0;
    uint8_t head[16], *buf, *p;
    Apache__Rocketmq__V2__QueryRouteResponse *got;
    head[len++] = 0x12;   /* message_queues (2), one queue of every copy */
    len += put_varint(head + len, inner);
    buf = malloc(len + inner);
    memcpy(buf, head, len);
    for (p = buf + len; p < buf + len + inner; p += sizeof(broker)) memcpy(p, broker, sizeof(broker));
    got = (void *)mql_unpack_bytes(&apache__rocketmq__v2__query_route_response__descriptor, buf, len + inner);
    CHECK(got == NULL);
    if (got) protobuf_c_message_free_unpacked(&got->base, NULL);
    free(buf);
}

int main(void) {
    RUN(copies_every_system_property);
    RUN(reads_a_priority_and_writes_an_explicit_zero);
    RUN(reads_the_lite_topic);
    RUN(inflates_a_gzip_body_whose_digest_covers_the_wire_bytes);
    RUN(calls_a_digest_mismatch_corrupted_and_keeps_what_a_release_needs);
    RUN(calls_a_nul_inside_a_text_field_corrupted);
    RUN(calls_a_message_with_too_many_fields_malformed);
    RUN(calls_a_frame_repeating_a_singular_message_malformed);
    RUN(takes_the_most_properties_a_broker_stores);
    RUN(calls_a_message_without_identity_malformed);
    RUN(calls_bytes_that_do_not_decode_malformed);
    RUN(reads_status_and_timestamp_frames);
    RUN(saturates_wild_timestamps);
    RUN(reads_telemetry_settings_with_saturated_durations);
    RUN(reads_a_reconnect_endpoints_command);
    RUN(reads_the_whole_retry_policy_and_fifo);
    RUN(reads_an_orphaned_transaction_check);
    RUN(refuses_a_telemetry_frame_with_too_many_fields);
    RUN(refuses_a_reply_that_would_decode_past_its_budget);
    RUN(stops_merging_a_repeated_singular_field_at_the_budget);
    return TEST_REPORT("codec");
}
