/* dv_request_fuzz.c -- libFuzzer target: the dev broker's request decoders
 * and handlers (dv_handlers.c) on arbitrary bytes, through dv_server_handle
 * (a call without a transport).
 *
 * Input: byte 0 picks the wire cases of deliveries (bit 0 gzip, 1 gzip
 * framing, 2-3 digest type, 4 corrupt digest, 5 malformed, 6 truncated frame,
 * 7 time scale 0.001); then records [rpc][len hi][len lo][len bytes]: rpc % 10
 * picks the RPC (8: one the broker does not serve), bit 7 sends it as a client
 * that never sent settings. Every input starts from a reset broker with topic
 * "t" and a consumer "fuzz" in group "g" that has sent its settings, and ends
 * with the transaction checks run until every half message left open is
 * dropped (no producer stream is there to be asked).
 *
 * Built with -DDV_FUZZ_WRITE_SEEDS it is instead a program that writes the
 * seed corpus (spec/fuzz/corpus/dv_request/) into the directory it is given.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "dv_call.h"
#include "dv_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const rpcs[] = {"QueryRoute", "Heartbeat", "SendMessage", "ReceiveMessage",
                                   "AckMessage", "Telemetry", "NotifyClientTermination",
                                   "ChangeInvisibleDuration", "PullMessage", "EndTransaction"};
#define NRPCS (sizeof(rpcs) / sizeof(rpcs[0]))
enum { R_ROUTE, R_HEARTBEAT, R_SEND, R_RECEIVE, R_ACK, R_TELEMETRY, R_TERMINATE, R_CHANGE,
       R_UNSERVED, R_END_TRANSACTION };

static uint8_t *pack(const ProtobufCMessage *m, size_t *n) {
    uint8_t *out;
    *n = protobuf_c_message_get_packed_size(m);
    out = malloc(*n ? *n : 1);
    if (!out) abort();
    protobuf_c_message_pack(m, out);
    return out;
}

/* TelemetryCommand{settings{SIMPLE_CONSUMER, subscription{group "g"}}} */
static uint8_t *consumer_settings(size_t *n) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__Settings set = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    Apache__Rocketmq__V2__Subscription sub = APACHE__ROCKETMQ__V2__SUBSCRIPTION__INIT;
    Apache__Rocketmq__V2__Resource group = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    group.name = "g";
    sub.group = &group;
    set.client_type = APACHE__ROCKETMQ__V2__CLIENT_TYPE__SIMPLE_CONSUMER;
    set.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION;
    set.subscription = &sub;
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    cmd.settings = &set;
    return pack(&cmd.base, n);
}

static void set_wire_cases(dv_server *s, uint8_t bits) {
    dv_faults *f = dv_server_faults(s);
    f->gzip = bits & 1 ? 1 : 0;
    f->gzip_framing = bits >> 1 & 1;
    f->digest = (dv_digest)((bits >> 2 & 3) % 3);
    f->corrupt_digest = bits & 16 ? 1 : 0;
    f->malformed = bits & 32 ? 1 : 0;
    f->truncated_frame = bits & 64 ? 1 : 0;
    if (bits & 128) f->time_scale = 0.001;
}

/* Each pass of the broker's check asks about (or, past tx_check_max checks,
 * drops) every half message whose check is due; at the end of time every one
 * is due at every pass. */
static void check_transactions_to_the_end(dv_server *s) {
    int k, passes = dv_server_faults(s)->tx_check_max + 1;
    pthread_mutex_lock(dv_server_lock(s));
    for (k = 0; k < passes; k++) dv_check_transactions(s, INT64_MAX);
    if (s->halves.n != 0) abort();
    pthread_mutex_unlock(dv_server_lock(s));
}

static dv_server *srv;
static uint8_t *settings;
static size_t settings_len;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t i = 1;
    if (!srv) {
        int port;
        srv = dv_server_new("127.0.0.1:0", &port);
        if (!srv) abort();
        settings = consumer_settings(&settings_len);
    }
    dv_server_reset(srv);
    dv_server_add_topic(srv, "t");
    dv_server_handle(srv, "Telemetry", "fuzz", settings, settings_len);
    if (size == 0) return 0;
    set_wire_cases(srv, data[0]);
    while (i + 3 <= size) {
        uint8_t rpc = data[i];
        size_t len = (size_t)data[i + 1] << 8 | data[i + 2];
        i += 3;
        if (len > size - i) len = size - i;
        dv_server_handle(srv, rpcs[(rpc & 127) % NRPCS], rpc & 128 ? "stranger" : "fuzz", data + i, len);
        i += len;
    }
    check_transactions_to_the_end(srv);
    return 0;
}

#ifdef DV_FUZZ_WRITE_SEEDS
/* ------------------------------------------------------------ the seed corpus */

typedef struct seed { uint8_t buf[8192]; size_t n; } seed;

static void add(seed *sd, int rpc, const ProtobufCMessage *m) {
    size_t n;
    uint8_t *b = pack(m, &n);
    if (sd->n + 3 + n > sizeof(sd->buf)) abort();
    sd->buf[sd->n++] = (uint8_t)rpc;
    sd->buf[sd->n++] = (uint8_t)(n >> 8);
    sd->buf[sd->n++] = (uint8_t)n;
    memcpy(sd->buf + sd->n, b, n);
    sd->n += n;
    free(b);
}

static void write_seed(const char *dir, const char *name, const seed *sd) {
    char path[512];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(sd->buf, 1, sd->n, f) != sd->n) abort();
    fclose(f);
}

static Apache__Rocketmq__V2__Resource topic_t = APACHE__ROCKETMQ__V2__RESOURCE__INIT,
                                      group_g = APACHE__ROCKETMQ__V2__RESOURCE__INIT;

/* A send of message id; half: a half message (TRANSACTION type), whose
 * transaction the broker names DVTX<16 digits>, counting from 1 after a reset. */
static void add_message(seed *sd, const char *id, const char *body, int64_t deliver_s, int half) {
    Apache__Rocketmq__V2__SendMessageRequest req = APACHE__ROCKETMQ__V2__SEND_MESSAGE_REQUEST__INIT;
    Apache__Rocketmq__V2__Message m = APACHE__ROCKETMQ__V2__MESSAGE__INIT, *ms[1] = {&m};
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Google__Protobuf__Timestamp at = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Duration recovery = GOOGLE__PROTOBUF__DURATION__INIT;
    sp.message_id = (char *)id;
    sp.tag = "a";
    if (half) {
        sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__TRANSACTION;
        recovery.seconds = 1;
        sp.orphaned_transaction_recovery_duration = &recovery;
    }
    if (deliver_s) {
        at.seconds = deliver_s;
        sp.delivery_timestamp = &at;
        sp.born_timestamp = &at;
    }
    m.topic = &topic_t;
    m.system_properties = &sp;
    m.body.data = (uint8_t *)body;
    m.body.len = strlen(body);
    req.n_messages = 1;
    req.messages = ms;
    add(sd, R_SEND, &req.base);
}

static void add_send(seed *sd, const char *id, const char *body, int64_t deliver_s) {
    add_message(sd, id, body, deliver_s, 0);
}

static void add_half(seed *sd, const char *id, const char *body) {
    add_message(sd, id, body, 0, 1);
}

static void add_receive(seed *sd, int64_t invisible_s, int64_t poll_s) {
    Apache__Rocketmq__V2__ReceiveMessageRequest req = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_REQUEST__INIT;
    Apache__Rocketmq__V2__MessageQueue mq = APACHE__ROCKETMQ__V2__MESSAGE_QUEUE__INIT;
    Apache__Rocketmq__V2__FilterExpression fe = APACHE__ROCKETMQ__V2__FILTER_EXPRESSION__INIT;
    Google__Protobuf__Duration inv = GOOGLE__PROTOBUF__DURATION__INIT, poll = GOOGLE__PROTOBUF__DURATION__INIT;
    mq.topic = &topic_t;
    fe.expression = "a||b";
    inv.seconds = invisible_s;
    poll.seconds = poll_s;
    req.group = &group_g;
    req.message_queue = &mq;
    req.filter_expression = &fe;
    req.batch_size = 4;
    req.invisible_duration = &inv;
    req.long_polling_timeout = &poll;
    add(sd, R_RECEIVE, &req.base);
}

static void add_end(seed *sd, const char *id, const char *tx,
                    Apache__Rocketmq__V2__TransactionResolution how) {
    Apache__Rocketmq__V2__EndTransactionRequest req = APACHE__ROCKETMQ__V2__END_TRANSACTION_REQUEST__INIT;
    req.topic = &topic_t;
    req.message_id = (char *)id;
    req.transaction_id = (char *)tx;
    req.resolution = how;
    req.source = APACHE__ROCKETMQ__V2__TRANSACTION_SOURCE__SOURCE_CLIENT;
    add(sd, R_END_TRANSACTION, &req.base);
}

static void add_ack(seed *sd, const char *handle) {
    Apache__Rocketmq__V2__AckMessageRequest req = APACHE__ROCKETMQ__V2__ACK_MESSAGE_REQUEST__INIT;
    Apache__Rocketmq__V2__AckMessageEntry e = APACHE__ROCKETMQ__V2__ACK_MESSAGE_ENTRY__INIT, *es[1] = {&e};
    e.message_id = "m1";
    e.receipt_handle = (char *)handle;
    req.group = &group_g;
    req.topic = &topic_t;
    req.n_entries = 1;
    req.entries = es;
    add(sd, R_ACK, &req.base);
}

static void add_change(seed *sd, const char *handle, int64_t seconds) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationRequest req =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_REQUEST__INIT;
    Google__Protobuf__Duration d = GOOGLE__PROTOBUF__DURATION__INIT;
    d.seconds = seconds;
    req.group = &group_g;
    req.topic = &topic_t;
    req.receipt_handle = (char *)handle;
    req.invisible_duration = &d;
    req.message_id = "m1";
    add(sd, R_CHANGE, &req.base);
}

/* Settings that already carry the fields the broker fills in (a backoff policy,
 * a long polling timeout): the answer must not lose the client's own. */
static void add_settings_with_policies(seed *sd) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__Settings set = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    Apache__Rocketmq__V2__Subscription sub = APACHE__ROCKETMQ__V2__SUBSCRIPTION__INIT;
    Apache__Rocketmq__V2__RetryPolicy retry = APACHE__ROCKETMQ__V2__RETRY_POLICY__INIT;
    Apache__Rocketmq__V2__ExponentialBackoff exp = APACHE__ROCKETMQ__V2__EXPONENTIAL_BACKOFF__INIT;
    Google__Protobuf__Duration d = GOOGLE__PROTOBUF__DURATION__INIT;
    d.seconds = 7;
    exp.initial = &d;
    exp.max = &d;
    retry.max_attempts = 5;
    retry.strategy_case = APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_EXPONENTIAL_BACKOFF;
    retry.exponential_backoff = &exp;
    sub.group = &group_g;
    sub.long_polling_timeout = &d;
    set.client_type = APACHE__ROCKETMQ__V2__CLIENT_TYPE__SIMPLE_CONSUMER;
    set.backoff_policy = &retry;
    set.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION;
    set.subscription = &sub;
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    cmd.settings = &set;
    add(sd, R_TELEMETRY, &cmd.base);
}

int main(int argc, char **argv) {
    /* a handle of topic 0, group 0, message 0, token 1 (the first pop), far deadline */
    const char *h = "dv 0 0 0 1 9000000000000";
    Apache__Rocketmq__V2__QueryRouteRequest route = APACHE__ROCKETMQ__V2__QUERY_ROUTE_REQUEST__INIT;
    Apache__Rocketmq__V2__HeartbeatRequest hb = APACHE__ROCKETMQ__V2__HEARTBEAT_REQUEST__INIT;
    Apache__Rocketmq__V2__NotifyClientTerminationRequest term =
        APACHE__ROCKETMQ__V2__NOTIFY_CLIENT_TERMINATION_REQUEST__INIT;
    seed sd;
    if (argc != 2) return 2;
    topic_t.name = "t";
    group_g.name = "g";
    memset(&sd, 0, sizeof(sd));
    sd.buf[sd.n++] = 0;
    add_send(&sd, "m1", "hello", 0);
    add_receive(&sd, 30, 5);
    add_ack(&sd, h);
    write_seed(argv[1], "send-receive-ack", &sd);
    sd.n = 0;
    sd.buf[sd.n++] = 0x1f;   /* gzip, gzip framing, crc32, corrupt */
    add_send(&sd, "m1", "hello hello hello hello", 0);
    add_receive(&sd, 30, 5);
    add_change(&sd, h, 10);
    add_ack(&sd, "dv 0 0 0 2 9000000000000");
    write_seed(argv[1], "send-receive-change-gzip", &sd);
    sd.n = 0;
    sd.buf[sd.n++] = 0x60;   /* malformed, truncated */
    add_send(&sd, "m1", "x", 0);
    add_receive(&sd, INT64_MAX / 2, INT64_MAX);   /* durations that must not overflow */
    add_change(&sd, h, INT64_MAX);
    add_change(&sd, "dv 99 0 0 1 1", 10);
    write_seed(argv[1], "huge-durations", &sd);
    sd.n = 0;
    sd.buf[sd.n++] = 0x80;
    add_send(&sd, "m1", "later", INT64_MAX / 1000);   /* delivery time far away */
    add_send(&sd, "m2", "now", 1);
    add_receive(&sd, 10, 0);
    route.topic = &topic_t;
    add(&sd, R_ROUTE, &route.base);
    hb.group = &group_g;
    add(&sd, R_HEARTBEAT, &hb.base);
    add(&sd, R_HEARTBEAT | 128, &hb.base);
    term.group = &group_g;
    add(&sd, R_TERMINATE, &term.base);
    add(&sd, 8, &term.base);
    write_seed(argv[1], "route-heartbeat-terminate", &sd);
    sd.n = 0;
    sd.buf[sd.n++] = 0;
    add_settings_with_policies(&sd);
    write_seed(argv[1], "settings-with-policies", &sd);
    /* committed, rolled back, ended twice, an empty id, an unknown one, one
     * left open for the checks; then the committed one is received */
    sd.n = 0;
    sd.buf[sd.n++] = 0;
    add_half(&sd, "m1", "commit me");
    add_half(&sd, "m2", "roll me back");
    add_half(&sd, "m3", "left open");
    add_end(&sd, "m1", "DVTX0000000000000001", APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__COMMIT);
    add_end(&sd, "m2", "DVTX0000000000000002", APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__ROLLBACK);
    add_end(&sd, "m1", "DVTX0000000000000001", APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__ROLLBACK);
    add_end(&sd, "m1", "", APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__COMMIT);
    add_end(&sd, "m9", "DVTX9999999999999999", APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__COMMIT);
    add_end(&sd, "m3", "DVTX0000000000000003",
            APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__TRANSACTION_RESOLUTION_UNSPECIFIED);
    add_receive(&sd, 30, 0);
    write_seed(argv[1], "transactions", &sd);
    return 0;
}
#endif
