/* dv_broker_test.c -- the dev broker's pure parts without a server: the
 * control-line parser and its range checks, receipt handles read from
 * untrusted text, delivery times, and the wire cases a delivery can carry. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "dv_command.h"
#include "dv_store.h"
#include "dv_wire.h"
#include "mql_test.h"

static int set(dv_faults *f, const char *line) {
    dv_command cmd;
    char err[160];
    if (dv_command_parse(line, &cmd, err, sizeof(err)) < 0 || cmd.kind != DV_CMD_SET) return -1;
    return dv_faults_set(f, cmd.name, cmd.value, err, sizeof(err));
}

static void parses_commands_and_refuses_what_is_out_of_range(void) {
    dv_faults f;
    dv_command cmd;
    char err[160];
    dv_faults_init(&f);
    CHECK(set(&f, "set gzip 1") == 0 && f.gzip == 1);
    CHECK(set(&f, "set digest sha1") == 0 && f.digest == DV_DIGEST_SHA1);
    CHECK(set(&f, "set malformed_kind topic") == 0 && f.malformed_kind == DV_MALFORMED_TOPIC);
    CHECK(set(&f, "set corrupt_digest 1.5") < 0 && f.corrupt_digest == 0);
    CHECK(set(&f, "set delay_change_ms 1e300") < 0 && f.delay_change_ms == 0);
    CHECK(set(&f, "set time_scale 0") < 0 && f.time_scale == 1);
    CHECK(set(&f, "set paused 0.5") < 0);
    CHECK(set(&f, "set fail_ack nan") < 0);
    CHECK(set(&f, "set nonsense 1") < 0);
    CHECK(dv_command_parse("publish t1 1500", &cmd, err, sizeof(err)) == 0 && cmd.kind == DV_CMD_PUBLISH &&
          cmd.delay_ms == 1500 && strcmp(cmd.name, "t1") == 0);
    CHECK(dv_command_parse("publish t1 -1", &cmd, err, sizeof(err)) < 0);
    CHECK(dv_command_parse("  stats  ", &cmd, err, sizeof(err)) == 0 && cmd.kind == DV_CMD_STATS);
    CHECK(dv_command_parse("set a b c d e", &cmd, err, sizeof(err)) < 0);
    CHECK(dv_command_parse("", &cmd, err, sizeof(err)) < 0);
}

/* A topic "t" with one message sent by a producer, delivered at deliver_ms (0: at once). */
static dv_topic *one_message(dv_store *s, int64_t deliver_ms) {
    Apache__Rocketmq__V2__Message m = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Google__Protobuf__Timestamp at = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    dv_topic *t;
    dv_store_init(s);
    t = dv_topic_create(s, "t");
    sp.message_id = "m1";
    if (deliver_ms) {
        at.seconds = deliver_ms / 1000;
        sp.delivery_timestamp = &at;
    }
    m.system_properties = &sp;
    dv_topic_append(t, &m, "m1", 1000);
    return t;
}

static void refuses_handles_that_overflow_or_carry_junk(void) {
    dv_store s;
    dv_topic *t = one_message(&s, 0);
    size_t idx[1];
    char h[128];
    CHECK(dv_pop(&s, t, "g", "*", 1, 10000, 1000, idx) == 1);
    dv_handle_format(h, sizeof(h), &s, t, "g", idx[0]);
    CHECK(dv_ack(&s, "dv 99999999999999999999999 0 0 1 11000", 2000) == DV_HANDLE_MALFORMED);
    CHECK(dv_ack(&s, "dv 0 0 0 1 99999999999999999999", 2000) == DV_HANDLE_MALFORMED);
    CHECK(dv_ack(&s, "dv 0 0 0 1 -5", 2000) == DV_HANDLE_MALFORMED);
    CHECK(dv_ack(&s, "dv 0 0 0 1 11000 junk", 2000) == DV_HANDLE_MALFORMED);
    CHECK(dv_ack(&s, "dv 0 0 0 +1 11000", 2000) == DV_HANDLE_MALFORMED);
    CHECK(dv_ack(&s, "", 2000) == DV_HANDLE_MALFORMED);
    CHECK(dv_ack(&s, h, 12000) == DV_HANDLE_EXPIRED);
    CHECK(dv_ack(&s, h, 2000) == DV_HANDLE_OK);
    CHECK(dv_ack(&s, h, 2000) == DV_HANDLE_SUPERSEDED);
    dv_store_free(&s);
}

static void holds_a_message_until_its_delivery_time(void) {
    dv_store s;
    dv_topic *t = one_message(&s, 5000);
    size_t idx[1];
    CHECK(dv_pop(&s, t, "g", "*", 1, 10000, 4999, idx) == 0);
    CHECK(dv_pop(&s, t, "g", "*", 1, 10000, 5000, idx) == 1);
    dv_store_free(&s);
}

/* Appends n messages to t, sent at 1000 ms. */
static void append(dv_topic *t, size_t n) {
    Apache__Rocketmq__V2__Message m = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    size_t i;
    sp.message_id = "m";
    m.system_properties = &sp;
    for (i = 0; i < n; i++) dv_topic_append(t, &m, "m", 1000);
}

/* Pops and acks in batches of 32 until the topic has nothing ready for g. */
static size_t pop_and_ack_all(dv_store *s, dv_topic *t, const char *g) {
    size_t idx[32], n, i, total = 0;
    char h[128];
    while ((n = dv_pop(s, t, g, "*", 32, 10000, 1000, idx)) > 0) {
        for (i = 0; i < n; i++) {
            dv_handle_format(h, sizeof(h), s, t, g, idx[i]);
            CHECK(dv_ack(s, h, 1000) == DV_HANDLE_OK);
        }
        total += n;
    }
    return total;
}

/* The soak's shape: 100,000 messages received and acked 32 at a time. A
 * receive that walked every stored message would look at 100,000 views for
 * the last one (and 1.6e8 over the run); it must look at a few per message
 * over the run, and at a few in all once the acked ones have been passed. */
static void receives_past_acked_messages_without_looking_at_each(void) {
    dv_store s;
    dv_topic *t;
    size_t idx[32];
    dv_store_init(&s);
    t = dv_topic_create(&s, "t");
    append(t, 100000);
    CHECK(pop_and_ack_all(&s, t, "g") == 100000);
    CHECK(s.examined < 3 * 100000);          /* amortised: a few looks per message */
    append(t, 1);
    s.examined = 0;
    CHECK(dv_pop(&s, t, "g", "*", 32, 10000, 1000, idx) == 1 && idx[0] == 100000);
    CHECK(s.examined <= 4);
    dv_store_free(&s);
}

/* One message kept in flight at the front (a slow handler) while 100,000
 * behind it are acked: receives still look at few views, and the held one
 * comes back once its invisible duration ends, as the proxy redelivers it. */
static void a_message_in_flight_neither_slows_receives_nor_is_skipped(void) {
    dv_store s;
    dv_topic *t;
    size_t idx[32];
    dv_store_init(&s);
    t = dv_topic_create(&s, "t");
    append(t, 1);
    CHECK(dv_pop(&s, t, "g", "*", 1, 60000, 1000, idx) == 1 && idx[0] == 0);
    append(t, 100000);
    CHECK(pop_and_ack_all(&s, t, "g") == 100000);
    s.examined = 0;
    CHECK(dv_pop(&s, t, "g", "*", 32, 10000, 1000, idx) == 0);
    CHECK(s.examined <= 4);
    CHECK(dv_pop(&s, t, "g", "*", 32, 10000, 61000, idx) == 1 && idx[0] == 0);
    /* another group still sees every message */
    CHECK(pop_and_ack_all(&s, t, "other") == 100001);
    dv_store_free(&s);
}

static Apache__Rocketmq__V2__ReceiveMessageResponse *deliver(const dv_faults *f, uint8_t **bytes,
                                                             size_t *len) {
    size_t n;
    unsigned seed = 7;
    dv_wire_stats st;
    uint8_t *msg = dv_wire_full_message("t", "id1", 1700000000000LL, 1700000000000LL, &n);
    dv_delivery d = {msg, n, "h1", "127.0.0.1:1", 1700000000000LL, 1, 0, 0};
    memset(&st, 0, sizeof(st));
    *bytes = dv_wire_delivery(&d, f, &seed, len, &st);
    free(msg);
    return (void *)protobuf_c_message_unpack(&apache__rocketmq__v2__receive_message_response__descriptor,
                                             NULL, *len, *bytes);
}

static void writes_gzip_bodies_with_a_digest_of_the_bytes_sent(void) {
    dv_faults f;
    uint8_t *bytes, out[64];
    size_t len;
    uLongf outlen = sizeof(out);
    char hex[48];
    Apache__Rocketmq__V2__ReceiveMessageResponse *r;
    const Apache__Rocketmq__V2__SystemProperties *sp;
    dv_faults_init(&f);
    f.gzip = 1;
    f.digest = DV_DIGEST_CRC32;
    r = deliver(&f, &bytes, &len);
    CHECK(r && r->message && r->message->system_properties);
    if (!r) return;
    sp = r->message->system_properties;
    CHECK(sp->body_encoding == APACHE__ROCKETMQ__V2__ENCODING__GZIP);
    CHECK(uncompress(out, &outlen, r->message->body.data, r->message->body.len) == Z_OK);
    CHECK(outlen == 15 && memcmp(out, "dv publish body", 15) == 0);
    dv_digest_hex(DV_DIGEST_CRC32, r->message->body.data, r->message->body.len, hex);
    CHECK(sp->body_digest && sp->body_digest->type == APACHE__ROCKETMQ__V2__DIGEST_TYPE__CRC32 &&
          strcmp(sp->body_digest->checksum, hex) == 0);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    free(bytes);
}

static void cuts_frames_so_they_do_not_decode(void) {
    dv_faults f;
    uint8_t *bytes;
    size_t len;
    Apache__Rocketmq__V2__ReceiveMessageResponse *r;
    dv_faults_init(&f);
    f.truncated_frame = 1;
    r = deliver(&f, &bytes, &len);
    CHECK(r == NULL);
    if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
    free(bytes);
}

static void writes_digests_as_the_java_client_does(void) {
    char hex[48];
    dv_digest_hex(DV_DIGEST_MD5, (const uint8_t *)"abc", 3, hex);
    CHECK(strcmp(hex, "900150983CD24FB0D6963F7D28E17F72") == 0);
    dv_digest_hex(DV_DIGEST_SHA1, (const uint8_t *)"abc", 3, hex);
    CHECK(strcmp(hex, "A9993E364706816ABA3E25717850C26C9CD0D89D") == 0);
    dv_digest_hex(DV_DIGEST_CRC32, (const uint8_t *)"abc", 3, hex);
    CHECK(strcmp(hex, "352441C2") == 0);
    dv_digest_hex(DV_DIGEST_CRC32, (const uint8_t *)"", 0, hex);
    CHECK(strcmp(hex, "0") == 0);   /* no leading zeros, as Long.toHexString */
}

int main(void) {
    RUN(parses_commands_and_refuses_what_is_out_of_range);
    RUN(refuses_handles_that_overflow_or_carry_junk);
    RUN(holds_a_message_until_its_delivery_time);
    RUN(receives_past_acked_messages_without_looking_at_each);
    RUN(a_message_in_flight_neither_slows_receives_nor_is_skipped);
    RUN(writes_gzip_bodies_with_a_digest_of_the_bytes_sent);
    RUN(cuts_frames_so_they_do_not_decode);
    RUN(writes_digests_as_the_java_client_does);
    return TEST_REPORT("dv_broker_test");
}
