/* mql_call.c -- gRPC calls with RocketMQ headers on the grpc C core, and what
 * a finished one answered (see mql_call.h). */
#include "mql_call.h"

#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "mql.h"
#include "mql_codec.h"

/* The proxy maps x-mq-language through its *remoting* LanguageCode enum, which
 * knows CPP but not LUA; anything unknown fails Telemetry and Heartbeat. */
#define MQL_LANGUAGE "CPP"

static void add_md(mql_call *c, const char *key, grpc_slice value) {
    if (c->nmd >= c->md_cap) return;
    c->md[c->nmd].key = grpc_slice_from_static_string(key);
    c->md[c->nmd].value = grpc_slice_ref(value);
    c->nmd++;
}

static void hex_upper(const unsigned char *in, size_t n, char *out) {
    static const char digits[] = "0123456789ABCDEF";
    size_t i;
    for (i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static grpc_slice slice_of(const char *s) {
    return s && *s ? grpc_slice_from_copied_string(s) : grpc_empty_slice();
}

static void headers_init(mql_header_cache *h, const mql_identity *id) {
    h->client_id = slice_of(id->client_id);
    h->language = grpc_slice_from_static_string(MQL_LANGUAGE);
    h->protocol = grpc_slice_from_static_string("v2");
    h->version = grpc_slice_from_static_string(MQL_VERSION);
    h->namespace_ = slice_of(id->namespace_);
    h->token = slice_of(id->security_token);
    h->date = grpc_empty_slice();
    h->authorization = grpc_empty_slice();
    h->date_sec = -1;
    if (getrandom(h->request_base, sizeof(h->request_base), 0) != (ssize_t)sizeof(h->request_base))
        memset(h->request_base, 0x5a, sizeof(h->request_base));
    h->request_seq = 0;
    h->ready = 1;
}

void mql_call_identity_clear(mql_identity *id) {
    mql_header_cache *h = &id->headers;
    if (!h->ready) return;
    grpc_slice_unref(h->client_id);
    grpc_slice_unref(h->namespace_);
    grpc_slice_unref(h->token);
    grpc_slice_unref(h->date);
    grpc_slice_unref(h->authorization);
    memset(h, 0, sizeof(*h));
}

/* MQv2-HMAC-SHA1: the signature is HMAC-SHA1(secret, x-mq-date-time) in upper hex. */
static grpc_slice authorization_of(const mql_identity *id, const char *date) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    size_t mac_len = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1], value[512];
    if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA1", NULL, id->secret_key, strlen(id->secret_key),
                   (const unsigned char *)date, strlen(date), mac, sizeof(mac), &mac_len))
        return grpc_empty_slice();
    hex_upper(mac, mac_len, hex);
    snprintf(value, sizeof(value),
             "MQv2-HMAC-SHA1 Credential=%s, SignedHeaders=x-mq-date-time, Signature=%s",
             id->access_key, hex);
    return grpc_slice_from_copied_string(value);
}

static int signs(const mql_identity *id) {
    return id->access_key && *id->access_key && id->secret_key;
}

/* The date (and the signature over it) of this second. */
static void headers_date(mql_header_cache *h, const mql_identity *id) {
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    if ((int64_t)now == h->date_sec) return;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%Y%m%dT%H%M%SZ", &tm);
    grpc_slice_unref(h->date);
    grpc_slice_unref(h->authorization);
    h->date = grpc_slice_from_copied_string(date);
    h->authorization = signs(id) ? authorization_of(id, date) : grpc_empty_slice();
    h->date_sec = (int64_t)now;
}

/* A UUID-shaped id unique per call: the random base plus the call's number. */
static grpc_slice request_id(mql_header_cache *h) {
    unsigned char b[16];
    uint64_t seq = ++h->request_seq, carry = 0;
    char hex[33], out[37];
    int i;
    memcpy(b, h->request_base, sizeof(b));
    for (i = 15; i >= 0; i--) {
        uint64_t sum = (uint64_t)b[i] + (seq & 0xff) + carry;
        b[i] = (unsigned char)sum;
        carry = sum >> 8;
        seq >>= 8;
    }
    hex_upper(b, sizeof(b), hex);
    memcpy(out, hex, 8);
    out[8] = '-';
    memcpy(out + 9, hex + 8, 4);
    out[13] = '-';
    memcpy(out + 14, hex + 12, 4);
    out[18] = '-';
    memcpy(out + 19, hex + 16, 4);
    out[23] = '-';
    memcpy(out + 24, hex + 20, 12);
    out[36] = '\0';
    return grpc_slice_from_copied_string(out);
}

static void add_headers(mql_call *c, mql_identity *id) {
    mql_header_cache *h = &id->headers;
    grpc_slice rid;
    if (!h->ready) headers_init(h, id);
    headers_date(h, id);
    add_md(c, "x-mq-client-id", h->client_id);
    add_md(c, "x-mq-language", h->language);
    add_md(c, "x-mq-protocol", h->protocol);
    add_md(c, "x-mq-client-version", h->version);
    add_md(c, "x-mq-date-time", h->date);
    rid = request_id(h);
    add_md(c, "x-mq-request-id", rid);
    grpc_slice_unref(rid);
    if (id->namespace_ && *id->namespace_) add_md(c, "x-mq-namespace", h->namespace_);
    if (signs(id) && GRPC_SLICE_LENGTH(h->authorization) > 0) {
        add_md(c, "authorization", h->authorization);
        if (id->security_token && *id->security_token)
            add_md(c, "x-mq-session-token", h->token);
    }
}

/* How many headers add_headers may add for this identity. */
static size_t headers_max(const mql_identity *id) {
    size_t n = 6;   /* client id, language, protocol, version, date, request id */
    if (id->namespace_ && *id->namespace_) n++;
    if (signs(id)) n += 2;   /* authorization, session token */
    return n;
}

mql_channel *mql_call_channel_new(grpc_channel *grpc) {
    mql_channel *ch = mql_xcalloc(1, sizeof(*ch));
    ch->grpc = grpc;
    ch->refs = 1;
    return ch;
}

void mql_call_channel_unref(mql_channel *ch) {
    if (!ch || --ch->refs > 0) return;
    grpc_channel_destroy(ch->grpc);
    free(ch);
}

mql_call *mql_call_new(mql_channel *ch, grpc_completion_queue *cq, const char *method,
                       int64_t timeout_ms, mql_identity *id) {
    size_t md_cap = headers_max(id);
    mql_call *c = mql_xcalloc(1, sizeof(*c) + md_cap * sizeof(grpc_metadata));
    gpr_timespec deadline =
        timeout_ms < 0 ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
                       : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                      gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    c->method = method;
    c->md_cap = md_cap;
    c->channel = ch;
    ch->refs++;
    c->call = grpc_channel_create_call(ch->grpc, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                       grpc_slice_from_static_string(method), NULL, deadline,
                                       NULL);
    grpc_metadata_array_init(&c->md_in);
    grpc_metadata_array_init(&c->trailing);
    c->details = grpc_empty_slice();
    c->status = GRPC_STATUS_UNKNOWN;
    c->t_unary = (mql_tag){c, MQL_TAG_UNARY};
    c->t_start = (mql_tag){c, MQL_TAG_START};
    c->t_recv = (mql_tag){c, MQL_TAG_RECV};
    c->t_send = (mql_tag){c, MQL_TAG_SEND};
    c->t_status = (mql_tag){c, MQL_TAG_STATUS};
    add_headers(c, id);
    return c;
}

static int start(mql_call *c, grpc_op *ops, size_t n, mql_tag *tag) {
    if (grpc_call_start_batch(c->call, ops, n, tag, NULL) != GRPC_CALL_OK) return -1;
    c->in_flight++;
    return 0;
}

static void op_send_md(grpc_op *op, mql_call *c) {
    memset(op, 0, sizeof(*op));
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    op->data.send_initial_metadata.count = c->nmd;
    op->data.send_initial_metadata.metadata = c->md;
}

static void op_simple(grpc_op *op, grpc_op_type type) {
    memset(op, 0, sizeof(*op));
    op->op = type;
}

static void op_status(grpc_op *op, mql_call *c) {
    memset(op, 0, sizeof(*op));
    op->op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op->data.recv_status_on_client.trailing_metadata = &c->trailing;
    op->data.recv_status_on_client.status = &c->status;
    op->data.recv_status_on_client.status_details = &c->details;
}

static int start_recv(mql_call *c) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_buf;
    return start(c, &op, 1, &c->t_recv);
}

int mql_call_start_unary(mql_call *c, const ProtobufCMessage *req) {
    grpc_op ops[6];
    c->send_buf = mql_pack(req);
    op_send_md(&ops[0], c);
    op_simple(&ops[1], GRPC_OP_SEND_MESSAGE);
    ops[1].data.send_message.send_message = c->send_buf;
    op_simple(&ops[2], GRPC_OP_SEND_CLOSE_FROM_CLIENT);
    op_simple(&ops[3], GRPC_OP_RECV_INITIAL_METADATA);
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->md_in;
    op_simple(&ops[4], GRPC_OP_RECV_MESSAGE);
    ops[4].data.recv_message.recv_message = &c->recv_buf;
    op_status(&ops[5], c);
    return start(c, ops, 6, &c->t_unary);
}

/* The status batch goes first so that it is always pending while the call
 * lives; a failed start of a later batch then still ends in on_done. */
static int start_stream(mql_call *c, const ProtobufCMessage *req) {
    grpc_op ops[4], st;
    size_t n = 0;
    c->streaming = 1;
    op_status(&st, c);
    if (start(c, &st, 1, &c->t_status) < 0) return -1;
    op_send_md(&ops[n++], c);
    if (req) {
        c->send_buf = mql_pack(req);
        op_simple(&ops[n], GRPC_OP_SEND_MESSAGE);
        ops[n++].data.send_message.send_message = c->send_buf;
        op_simple(&ops[n++], GRPC_OP_SEND_CLOSE_FROM_CLIENT);
        c->half_closed = 1;
    }
    op_simple(&ops[n], GRPC_OP_RECV_INITIAL_METADATA);
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &c->md_in;
    if (start(c, ops, n, &c->t_start) < 0 || start_recv(c) < 0) {
        grpc_call_cancel(c->call, NULL);
        return 0;   /* the status batch reports the failure through on_done */
    }
    return 0;
}

int mql_call_start_server_stream(mql_call *c, const ProtobufCMessage *req) {
    return start_stream(c, req);
}

int mql_call_start_bidi(mql_call *c) {
    return start_stream(c, NULL);
}

int mql_call_send(mql_call *c, const ProtobufCMessage *msg) {
    grpc_op op;
    if (c->send_buf || c->half_closed) return -1;   /* one write at a time */
    c->send_buf = mql_pack(msg);
    op_simple(&op, GRPC_OP_SEND_MESSAGE);
    op.data.send_message.send_message = c->send_buf;
    if (start(c, &op, 1, &c->t_send) < 0) {
        grpc_byte_buffer_destroy(c->send_buf);
        c->send_buf = NULL;
        return -1;
    }
    return 0;
}

void mql_call_half_close(mql_call *c) {
    grpc_op op;
    if (c->half_closed || c->send_buf) return;   /* never beside a pending write */
    op_simple(&op, GRPC_OP_SEND_CLOSE_FROM_CLIENT);
    if (start(c, &op, 1, &c->t_send) == 0) c->half_closed = 1;
}

void mql_call_cancel(mql_call *c) {
    grpc_call_cancel(c->call, NULL);
}

void mql_call_complete(mql_tag *tag, int success) {
    mql_call *c = tag->call;
    grpc_byte_buffer *reply;
    c->in_flight--;
    switch (tag->what) {
    case MQL_TAG_UNARY:
    case MQL_TAG_STATUS:
        c->status_seen = 1;
        break;
    case MQL_TAG_START:
        break;   /* a failed start shows up in the status */
    case MQL_TAG_SEND:
        if (c->send_buf) grpc_byte_buffer_destroy(c->send_buf);
        c->send_buf = NULL;
        break;
    case MQL_TAG_RECV:
        reply = c->recv_buf;
        c->recv_buf = NULL;
        if (success && reply) {
            if (c->on_message) c->on_message(c, reply);
            grpc_byte_buffer_destroy(reply);
            start_recv(c);   /* keep exactly one read pending until the end */
        } else if (reply) {
            grpc_byte_buffer_destroy(reply);
        }
        break;
    }
    if (c->in_flight == 0 && c->status_seen && c->on_done) c->on_done(c);
}

void mql_call_free(mql_call *c) {
    size_t i;
    if (!c) return;
    if (c->call) grpc_call_unref(c->call);
    mql_call_channel_unref(c->channel);   /* after the call: it may be the last reference */
    for (i = 0; i < c->nmd; i++) grpc_slice_unref(c->md[i].value);
    grpc_metadata_array_destroy(&c->md_in);
    grpc_metadata_array_destroy(&c->trailing);
    if (c->send_buf) grpc_byte_buffer_destroy(c->send_buf);
    if (c->recv_buf) grpc_byte_buffer_destroy(c->recv_buf);
    grpc_slice_unref(c->details);
    free(c);
}

const char *mql_call_code_name(grpc_status_code s) {
    switch (s) {
    case GRPC_STATUS_OK: return "OK";
    case GRPC_STATUS_CANCELLED: return "CANCELLED";
    case GRPC_STATUS_DEADLINE_EXCEEDED: return "TIMEOUT";
    case GRPC_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case GRPC_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case GRPC_STATUS_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case GRPC_STATUS_UNAUTHENTICATED: return "UNAUTHENTICATED";
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case GRPC_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case GRPC_STATUS_INTERNAL: return "INTERNAL";
    default: return "GRPC_ERROR";
    }
}

void mql_call_result(mql_call *call, const mql_pb_status *st, mql_result *r) {
    const char *what = strrchr(call->method, '/');
    what = what ? what + 1 : call->method;
    if (call->status != GRPC_STATUS_OK) {
        char *details = grpc_slice_to_c_string(call->details);
        /* a 5.2.0 proxy denies an ACL check with no description at all */
        const char *none = call->status == GRPC_STATUS_PERMISSION_DENIED
            ? "denied by the proxy's ACL (unknown access key, wrong secret or missing permission)"
            : "transport failure";
        mql_result_fail(r, mql_call_code_name(call->status), "%s: %s", what,
                        details && *details ? details : none);
        gpr_free(details);
        return;
    }
    mql_result_from_status(r, st, what);
}

void *mql_call_reply(mql_call *call, const ProtobufCMessageDescriptor *desc, mql_result *r) {
    /* Every response of the v2 API carries its Status in a field named "status". */
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(desc, "status");
    ProtobufCMessage *reply = mql_unpack(desc, call->recv_buf);
    const mql_pb_status *st = NULL;
    if (reply && f) st = *(const mql_pb_status *const *)((const char *)reply + f->offset);
    if (!reply && call->status == GRPC_STATUS_OK) {
        /* bytes no honest proxy sends: not a message of this type, or one
         * whose unpack would pass its budget (mql_unpack) */
        const char *what = strrchr(call->method, '/');
        what = what ? what + 1 : call->method;
        if (!call->recv_buf) mql_result_fail(r, "PROTOCOL", "%s: the call ended OK with no reply", what);
        else mql_result_fail(r, "PROTOCOL", "%s: the reply did not decode (malformed, or over %zu MiB unpacked)",
                             what, MQL_UNPACK_BYTES_MAX >> 20);
        return NULL;
    }
    mql_call_result(call, st, r);
    return reply;
}

void mql_call_reply_free(void *reply) {
    if (reply) protobuf_c_message_free_unpacked(reply, NULL);
}
