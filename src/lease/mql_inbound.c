/* mql_inbound.c -- judging ReceiveMessage and Telemetry frames (see mql_inbound.h). */
#include "mql_inbound.h"

#include <stdlib.h>
#include <string.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "mql_body.h"
#include "mql_codec.h"

typedef Apache__Rocketmq__V2__ReceiveMessageResponse pb_receive_response;
typedef Apache__Rocketmq__V2__Message pb_message;

void mql_frame_clear(mql_frame *f) {
    mql_message_clear(&f->msg);
    memset(f, 0, sizeof(*f));
}

/* ---- the frame's wire bytes, walked before they are unpacked ----
 *
 * protobuf-c hands a string field over as a C string, so a NUL inside one
 * cuts it there without a word: the tag "vip\0x" would read as "vip", the
 * property names "a" and "a\0x" as one name, the later value winning. The
 * official Java client (protobuf-java) reads the whole string, and a
 * remoting producer's properties may carry one (MessageDecoder separates
 * them with \u0001 and \u0002 only). Such a message cannot be handed over
 * as it was sent, so it is told apart: every string field of every message
 * within the frame is looked at (bytes fields, the body and the properties'
 * values, keep their NULs as data).
 *
 * protobuf-c also allocates for every field it meets before returning
 * anything (a message per map entry, a pointer per key, an element per
 * packed number, a copy of each unknown field), so the same walk counts the
 * fields and a frame with more than MQL_FRAME_FIELDS_MAX is never unpacked.
 * The walk allocates nothing and reads each byte once at most (a nested
 * message is walked where its parent would skip it, a bytes field skipped
 * unread); the schema has no recursive message, so it is as deep as the
 * schema. Bytes that do not parse are left to protobuf_c_message_unpack,
 * which refuses them at the same place or earlier (its scan of a message's
 * fields comes before it parses any), so nothing past where the walk stopped
 * is ever allocated for. */

typedef struct wire_walk {
    size_t fields_left;   /* fields the frame may still have */
    int nul_text;         /* a string field holds a NUL */
    const char *refused;  /* why the frame is not to be unpacked, or NULL */
} wire_walk;

static int wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    unsigned shift;
    *v = 0;
    for (shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 1;
    }
    return 0;
}

/* protobuf-c reads a repeated scalar sent length-prefixed as packed, whatever
 * the schema says (priority is [packed = false]) */
static int packable(ProtobufCType t) {
    return t != PROTOBUF_C_TYPE_STRING && t != PROTOBUF_C_TYPE_BYTES && t != PROTOBUF_C_TYPE_MESSAGE;
}

static int wire_walk_message(wire_walk *w, const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                             size_t len);

/* The payload of one length-prefixed field fd: -1 when the frame has too many fields. */
static int wire_walk_payload(wire_walk *w, const ProtobufCFieldDescriptor *fd, const uint8_t *p, size_t n) {
    if (fd->type == PROTOBUF_C_TYPE_STRING) {
        if (!w->nul_text && memchr(p, 0, n)) w->nul_text = 1;
        return 0;
    }
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE) return wire_walk_message(w, fd->descriptor, p, n);
    if (fd->label != PROTOBUF_C_LABEL_REPEATED || !packable(fd->type)) return 0;
    if (n > w->fields_left) {   /* packed: a byte or more an element */
        w->refused = "too_many_fields";
        return -1;
    }
    w->fields_left -= n;
    return 0;
}

/* A singular message field sent more than once in one message: protobuf-c
 * merges each copy into the one before, copying the repeated fields of both
 * into a new array, so n copies cost n^2 (65,500 copies of four bytes,
 * system_properties { keys: "" }, took seconds). protobuf-java, the proxy's
 * encoder, writes such a field once. seen: the singular message fields met
 * so far in this message, by their index in desc (the schema's messages
 * have fewer than 64 fields; one past that is not tracked). */
static int repeats_singular_message(const ProtobufCMessageDescriptor *desc, const ProtobufCFieldDescriptor *fd,
                                    uint64_t *seen) {
    size_t i;
    if (fd->type != PROTOBUF_C_TYPE_MESSAGE || fd->label == PROTOBUF_C_LABEL_REPEATED) return 0;
    i = (size_t)(fd - desc->fields);
    if (i >= 64) return 0;
    if (*seen & ((uint64_t)1 << i)) return 1;
    *seen |= (uint64_t)1 << i;
    return 0;
}

/* Walks a desc message in p[0..len) and those nested in it: -1 (at once) when
 * the frame is not to be unpacked (w->refused says why), else 0. */
static int wire_walk_message(wire_walk *w, const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                             size_t len) {
    const uint8_t *end = p + len;
    uint64_t seen = 0;
    while (p < end) {
        uint64_t key, n;
        const ProtobufCFieldDescriptor *fd;
        if (w->fields_left == 0) {
            w->refused = "too_many_fields";
            return -1;
        }
        w->fields_left--;
        if (!wire_varint(&p, end, &key)) return 0;
        switch (key & 7) {
        case PROTOBUF_C_WIRE_TYPE_VARINT: if (!wire_varint(&p, end, &n)) return 0; continue;
        case PROTOBUF_C_WIRE_TYPE_64BIT: if (end - p < 8) return 0; p += 8; continue;
        case PROTOBUF_C_WIRE_TYPE_32BIT: if (end - p < 4) return 0; p += 4; continue;
        case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED: break;
        default: return 0;   /* groups: protobuf-c refuses them */
        }
        if (!wire_varint(&p, end, &n) || n > (uint64_t)(end - p)) return 0;
        fd = key >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3)) : NULL;
        if (fd && repeats_singular_message(desc, fd, &seen)) {
            w->refused = "repeated_singular_field";
            return -1;
        }
        if (fd && wire_walk_payload(w, fd, p, (size_t)n) < 0) return -1;
        p += n;
    }
    return 0;
}

/* 0 when the frame is not to be unpacked (w->refused says why): more fields
 * than MQL_FRAME_FIELDS_MAX, or a singular message field sent twice */
static int wire_walk_frame(wire_walk *w, const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                           size_t len) {
    w->fields_left = MQL_FRAME_FIELDS_MAX;
    w->nul_text = 0;
    w->refused = NULL;
    return wire_walk_message(w, desc, data, len) == 0;
}

/* A message nobody can ack or renew is malformed; say which part is missing.
 * So is one whose id is longer than any broker makes (MQL_MESSAGE_ID_MAX in
 * mql.h): it holds no lease, so the broker hands it out again after its
 * invisible duration, and it costs its batch nothing but itself. A long
 * receipt handle is taken: the lease keeps it in an allocation of its own. */
static const char *unusable_identity(const mql_message *m) {
    if (!m->id || !*m->id) return "no_message_id";
    if (strnlen(m->id, MQL_MESSAGE_ID_MAX + 1) > MQL_MESSAGE_ID_MAX) return "message_id_too_long";
    if (!m->receipt_handle) return "no_receipt_handle";
    if (!m->topic || !*m->topic) return "no_topic";
    return NULL;
}

static void judge_message(mql_frame *f, const pb_message *pm, int nul_text, size_t max_body) {
    const Apache__Rocketmq__V2__SystemProperties *sp = pm->system_properties;
    const Apache__Rocketmq__V2__Digest *dg = sp ? sp->body_digest : NULL;
    mql_body_status st;
    mql_message_fields_from_pb(&f->msg, pm);
    if ((f->reason = unusable_identity(&f->msg)) != NULL) {
        f->kind = MQL_FRAME_MALFORMED;
        return;
    }
    if (nul_text) {
        f->kind = MQL_FRAME_CORRUPTED;
        f->reason = "nul_in_text";
        return;
    }
    st = mql_body_decode(sp->body_encoding, dg ? dg->type : 0, dg ? dg->checksum : NULL,
                         pm->body.data, pm->body.len, max_body, &f->msg.body, &f->msg.body_len);
    if (st != MQL_BODY_OK) {
        f->kind = MQL_FRAME_CORRUPTED;
        f->reason = mql_body_status_name(st);
        return;
    }
    f->kind = MQL_FRAME_MESSAGE;
}

/* A frame with too many fields (or a singular message field sent twice) is
 * malformed unread: it holds no lease (its
 * receipt handle is never looked at), so the broker hands it out again after
 * its invisible duration and the proxy dead-letters it once its attempts are
 * spent, as any message nobody acks. */
void mql_frame_decode(mql_frame *f, const uint8_t *data, size_t len, size_t max_body) {
    pb_receive_response *resp;
    wire_walk w;
    memset(f, 0, sizeof(*f));
    if (!wire_walk_frame(&w, &apache__rocketmq__v2__receive_message_response__descriptor, data, len)) {
        f->kind = MQL_FRAME_MALFORMED;
        f->reason = w.refused;
        return;
    }
    resp = (void *)protobuf_c_message_unpack(&apache__rocketmq__v2__receive_message_response__descriptor,
                                             NULL, len, data);
    if (!resp) {
        f->kind = MQL_FRAME_MALFORMED;
        f->reason = "undecodable";
        return;
    }
    switch (resp->content_case) {
    case APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_STATUS:
        f->kind = MQL_FRAME_STATUS;
        mql_result_from_status(&f->status, resp->status, "ReceiveMessage");
        break;
    case APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_MESSAGE:
        judge_message(f, resp->message, w.nul_text, max_body);
        break;
    default:
        f->kind = MQL_FRAME_OTHER;
        break;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

static int64_t duration_ms(const Google__Protobuf__Duration *d) {
    return d ? mql_duration_ms(d->seconds, d->nanos) : 0;   /* saturated, never negative */
}

static void read_backoff(mql_telemetry_reply *out, const Apache__Rocketmq__V2__RetryPolicy *rp) {
    mql_retry_policy *p = &out->retry;
    out->max_attempts = rp->max_attempts;
    p->max_attempts = rp->max_attempts > 0 ? rp->max_attempts : 0;
    if (rp->strategy_case == APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_EXPONENTIAL_BACKOFF &&
        rp->exponential_backoff) {
        float mul = rp->exponential_backoff->multiplier;
        out->backoff_initial_ms = duration_ms(rp->exponential_backoff->initial);
        out->backoff_max_ms = duration_ms(rp->exponential_backoff->max);
        p->initial_ms = out->backoff_initial_ms;
        p->max_ms = out->backoff_max_ms;
        /* NaN, negative or absurd multipliers read as 1: never a shrinking or endless wait */
        p->multiplier = (mul >= 1.0f && mul <= 1000.0f) ? (double)mul : 1.0;
    } else if (rp->strategy_case == APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_CUSTOMIZED_BACKOFF &&
               rp->customized_backoff && rp->customized_backoff->n_next > 0) {
        size_t i, n = rp->customized_backoff->n_next;
        out->backoff_initial_ms = duration_ms(rp->customized_backoff->next[0]);
        p->customized = 1;
        for (i = 0; i < n; i++) {
            int64_t step = duration_ms(rp->customized_backoff->next[i]);
            if (step > out->backoff_max_ms) out->backoff_max_ms = step;
            if (i < MQL_RETRY_STEPS_MAX) p->steps_ms[p->nsteps++] = step;
        }
        p->initial_ms = out->backoff_initial_ms;
        p->max_ms = out->backoff_max_ms;
    }
}

static void read_settings(mql_telemetry_reply *out, const Apache__Rocketmq__V2__Settings *s) {
    out->has_settings = 1;
    if (s->backoff_policy) read_backoff(out, s->backoff_policy);
    out->request_timeout_ms = duration_ms(s->request_timeout);
    if (s->pub_sub_case == APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION && s->subscription) {
        out->long_polling_ms = duration_ms(s->subscription->long_polling_timeout);
        out->receive_batch_size = s->subscription->receive_batch_size;
        out->fifo = s->subscription->fifo ? 1 : 0;
    } else if (s->pub_sub_case == APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_PUBLISHING && s->publishing) {
        out->max_body_size = s->publishing->max_body_size > 0 ? s->publishing->max_body_size : 0;
    }
}

/* RocketMQ's ClientActivity/GrpcClientChannel.processCheckTransaction sends the
 * half message as stored and the proxy's transaction id; the official clients
 * answer it with EndTransaction (source SERVER_CHECK). */
static void read_orphan(mql_telemetry_reply *out,
                        const Apache__Rocketmq__V2__RecoverOrphanedTransactionCommand *o, int nul_text,
                        size_t max_body) {
    const pb_message *pm = o->message;
    const Apache__Rocketmq__V2__SystemProperties *sp = pm ? pm->system_properties : NULL;
    const Apache__Rocketmq__V2__Digest *dg = sp ? sp->body_digest : NULL;
    mql_body_status st;
    if (!pm || !sp || !o->transaction_id || !*o->transaction_id) {
        out->orphan_bad = "no_transaction_id";
        return;
    }
    mql_message_fields_from_pb(&out->orphan, pm);
    if (!out->orphan.id || !*out->orphan.id || !out->orphan.topic || !*out->orphan.topic) {
        out->orphan_bad = !out->orphan.id || !*out->orphan.id ? "no_message_id" : "no_topic";
        mql_message_clear(&out->orphan);
        return;
    }
    if (nul_text) {   /* see wire_walk_message */
        out->orphan_bad = "nul_in_text";
        mql_message_clear(&out->orphan);
        return;
    }
    st = mql_body_decode(sp->body_encoding, dg ? dg->type : 0, dg ? dg->checksum : NULL,
                         pm->body.data, pm->body.len, max_body, &out->orphan.body, &out->orphan.body_len);
    if (st != MQL_BODY_OK) {
        out->orphan_bad = mql_body_status_name(st);
        mql_message_clear(&out->orphan);
        return;
    }
    out->orphan_transaction_id = mql_strdup(o->transaction_id);
    out->has_orphan = 1;
}

void mql_telemetry_clear(mql_telemetry_reply *out) {
    mql_message_clear(&out->orphan);
    free(out->orphan_transaction_id);
    out->orphan_transaction_id = NULL;
    out->has_orphan = 0;
}

void mql_telemetry_decode(mql_telemetry_reply *out, const uint8_t *data, size_t len, size_t max_body) {
    Apache__Rocketmq__V2__TelemetryCommand *cmd;
    wire_walk w;
    memset(out, 0, sizeof(*out));
    /* too many fields: refused unread, as a frame protobuf-c refuses */
    if (!wire_walk_frame(&w, &apache__rocketmq__v2__telemetry_command__descriptor, data, len)) return;
    cmd = (void *)protobuf_c_message_unpack(&apache__rocketmq__v2__telemetry_command__descriptor,
                                            NULL, len, data);
    if (!cmd) return;
    out->decoded = 1;
    if (cmd->status) {
        out->has_status = 1;
        mql_result_from_status(&out->status, cmd->status, "Telemetry");
    }
    if (cmd->command_case == APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS && cmd->settings)
        read_settings(out, cmd->settings);
    if (cmd->command_case == APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_RECONNECT_ENDPOINTS_COMMAND)
        out->reconnect_endpoints = 1;
    if (cmd->command_case ==
            APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_RECOVER_ORPHANED_TRANSACTION_COMMAND &&
        cmd->recover_orphaned_transaction_command)
        read_orphan(out, cmd->recover_orphaned_transaction_command, w.nul_text, max_body);
    protobuf_c_message_free_unpacked(&cmd->base, NULL);
}
