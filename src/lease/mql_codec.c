/* mql_codec.c -- protobuf-c <-> grpc byte buffers (see mql_codec.h). */
#include "mql_codec.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <stdlib.h>
#include <string.h>

#include "mql.h"

grpc_byte_buffer *mql_pack(const ProtobufCMessage *msg) {
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice slice = grpc_slice_malloc(len);
    grpc_byte_buffer *bb;
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

int mql_read_all(grpc_byte_buffer *bb, grpc_slice *out) {
    grpc_byte_buffer_reader reader;
    if (!bb || !grpc_byte_buffer_reader_init(&reader, bb)) return -1;
    *out = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    return 0;
}

/* The allocations of one unpack, counted as they are made and never given
 * back: protobuf-c allocates for every field it meets (a struct per
 * sub-message, a copy of each unknown field), so a reply of empty entries,
 * two bytes each on the wire, could make it allocate gigabytes out of a frame
 * the channel lets through (130 MiB: a Route of 65 million empty queues is
 * about 5 GB). Past the budget the allocator refuses, and protobuf-c frees
 * what it made and returns NULL. Counting what is freed too bounds the work
 * of a singular message field sent many times, which protobuf-c merges copy
 * by copy (each merge allocates both copies' repeated fields anew). */
typedef struct unpack_budget {
    size_t left;
} unpack_budget;

static void *budget_alloc(void *data, size_t size) {
    unpack_budget *b = data;
    if (size > b->left) {
        b->left = 0;
        return NULL;
    }
    b->left -= size;
    return malloc(size);
}

static void budget_free(void *data, void *ptr) {
    (void)data;
    free(ptr);
}

ProtobufCMessage *mql_unpack_bytes(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len) {
    unpack_budget b = {MQL_UNPACK_BYTES_MAX};
    ProtobufCAllocator a = {budget_alloc, budget_free, &b};
    /* freed later with the default allocator: both are malloc's */
    return protobuf_c_message_unpack(desc, &a, len, data);
}

ProtobufCMessage *mql_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb) {
    grpc_slice slice;
    ProtobufCMessage *msg;
    if (mql_read_all(bb, &slice) != 0) return NULL;
    msg = mql_unpack_bytes(desc, GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice));
    grpc_slice_unref(slice);
    return msg;
}

static char *dup_nonempty(const char *s) {
    return (s && *s) ? mql_strdup(s) : NULL;
}

static int64_t timestamp_ms(const Google__Protobuf__Timestamp *ts) {
    return ts ? mql_timestamp_ms(ts->seconds, ts->nanos) : 0;   /* saturated (mql.h) */
}

static void copy_properties(mql_message *out, const Apache__Rocketmq__V2__Message *in) {
    size_t i;
    out->nprops = in->n_user_properties;
    out->props = mql_xcalloc(in->n_user_properties, sizeof(*out->props));
    for (i = 0; i < in->n_user_properties; i++) {
        const char *k = in->user_properties[i]->key;
        const ProtobufCBinaryData *v = &in->user_properties[i]->value;
        out->props[i].key = mql_strdup(k ? k : "");
        out->props[i].value = mql_xmalloc(v->len + 1);   /* NUL-terminated too, for C callers */
        if (v->len) memcpy(out->props[i].value, v->data, v->len);
        out->props[i].value[v->len] = '\0';
        out->props[i].value_len = v->len;
    }
}

static void copy_system_properties(mql_message *out, const Apache__Rocketmq__V2__SystemProperties *sp) {
    size_t i;
    out->id = mql_strdup(sp->message_id ? sp->message_id : "");
    out->tag = dup_nonempty(sp->tag);
    out->message_group = dup_nonempty(sp->message_group);
    out->born_host = dup_nonempty(sp->born_host);
    out->store_host = dup_nonempty(sp->store_host);
    out->trace_context = dup_nonempty(sp->trace_context);
    out->receipt_handle = dup_nonempty(sp->receipt_handle);
    out->lite_topic = dup_nonempty(sp->lite_topic);
    out->nkeys = sp->n_keys;
    out->keys = mql_xcalloc(sp->n_keys, sizeof(char *));
    for (i = 0; i < sp->n_keys; i++) out->keys[i] = mql_strdup(sp->keys[i] ? sp->keys[i] : "");
    out->message_type = sp->message_type;
    out->delivery_attempt = sp->delivery_attempt;
    /* apis 2.1.x, explicit presence: the last one sent wins, as in a singular field */
    out->has_priority = sp->n_priority > 0;
    out->priority = out->has_priority ? sp->priority[sp->n_priority - 1] : 0;
    out->queue_id = sp->queue_id;
    out->queue_offset = sp->queue_offset;
    out->born_ms = timestamp_ms(sp->born_timestamp);
    out->store_ms = timestamp_ms(sp->store_timestamp);
    out->delivery_ms = timestamp_ms(sp->delivery_timestamp);
}

void mql_message_fields_from_pb(mql_message *out, const Apache__Rocketmq__V2__Message *in) {
    memset(out, 0, sizeof(*out));
    out->topic = mql_strdup(in->topic && in->topic->name ? in->topic->name : "");
    copy_properties(out, in);
    if (in->system_properties) copy_system_properties(out, in->system_properties);
    else out->id = mql_strdup("");
}

void mql_message_from_pb(mql_message *out, const Apache__Rocketmq__V2__Message *in) {
    mql_message_fields_from_pb(out, in);
    out->body_len = in->body.len;
    out->body = mql_xmalloc(in->body.len);
    if (in->body.len) memcpy(out->body, in->body.data, in->body.len);
}

void mql_result_from_status(mql_result *r, const mql_pb_status *st, const char *what) {
    char buf[32];
    if (!st) {
        mql_result_fail(r, "PROTOCOL", "%s: the server sent no status", what);
        return;
    }
    if (st->code == APACHE__ROCKETMQ__V2__CODE__OK) {
        mql_result_ok(r);
        return;
    }
    mql_result_fail(r, mql_code_name(st->code, buf, sizeof(buf)), "%s: %s (%d)", what,
                    st->message && *st->message ? st->message : "no message", st->code);
}

/* The fields of a handle with the proxy's layout, "ckQueueOffset popTime
 * invisibleTime reviveQid topicType brokerName queueId queueOffset ...
 * commitLogOffset" (9 to 16 of them, split at single spaces, field 7 the
 * message's queue offset in digits: ReceiptHandle.decode parses it as a
 * long, so an empty one is no offset): their count, or 0 for any other. */
#define HANDLE_FIELDS_MAX 16
static size_t handle_fields(const char *handle, const char **fields, size_t *lens) {
    const char *p = handle;
    size_t n = 0, i;
    while (*p && n < HANDLE_FIELDS_MAX) {
        const char *start = p;
        while (*p && *p != ' ') p++;
        fields[n] = start;
        lens[n++] = (size_t)(p - start);
        if (*p == ' ') p++;
    }
    if (*p || n < 9 || lens[7] == 0) return 0;
    for (i = 0; i < lens[7]; i++)
        if (fields[7][i] < '0' || fields[7][i] > '9') return 0;
    return n;
}

/* Why this exists: the broker matches an ack (or the "ack the old
 * checkpoint" step of the next change) to its checkpoint by (queueId,
 * ckQueueOffset, popTime). A change writes a new checkpoint that starts at
 * the message's own queueOffset, but the RocketMQ 5.2 proxy copies the *old*
 * ckQueueOffset into the handle it returns -- the start of the batch the
 * message was popped with. For every message but the first of its queue in
 * that batch the two disagree: the next ack or renewal misses, the
 * checkpoint revives and the message is delivered again (upstream issue
 * #9583, "ack doesn't work after changeInvisibleDuration"). Setting field 0
 * to field 7 makes the handle name the checkpoint the broker really wrote;
 * where the proxy already does so (5.1.4) it changes nothing. A handle that
 * does not have that shape is returned as it is. */
char *mql_handle_after_change(const char *handle) {
    const char *fields[HANDLE_FIELDS_MAX];
    size_t lens[HANDLE_FIELDS_MAX], rest = strlen(handle);
    char *out;
    if (!handle_fields(handle, fields, lens)) return mql_strdup(handle);
    rest -= lens[0];
    out = mql_xmalloc(lens[7] + rest + 1);
    memcpy(out, fields[7], lens[7]);
    memcpy(out + lens[7], handle + lens[0], rest + 1);
    return out;
}

/* A change leaves the message where it is: the new handle is built from the
 * request's brokerName, queueId and queueOffset (fields 5 to 7;
 * MQClientAPIImpl.changeInvisibleTimeAsync, ExtraInfoUtil.buildExtraInfo),
 * whatever else changed. */
int mql_handle_names_message(const char *got, const char *held) {
    const char *hf[HANDLE_FIELDS_MAX], *gf[HANDLE_FIELDS_MAX];
    size_t hl[HANDLE_FIELDS_MAX], gl[HANDLE_FIELDS_MAX], i;
    if (!handle_fields(held, hf, hl)) return 1;   /* opaque: nothing to compare */
    if (!handle_fields(got, gf, gl)) return 0;
    for (i = 5; i <= 7; i++)
        if (hl[i] != gl[i] || memcmp(hf[i], gf[i], hl[i]) != 0) return 0;
    return 1;
}

/* Field index of a handle with the proxy's layout, a number of at most 15
 * digits (epoch ms, or a duration); 1 and *out set, else 0. */
static int handle_number(const char *handle, int index, int64_t *out) {
    const char *p;
    int64_t v = 0;
    size_t fields = 1, digits = 0;
    if (!handle) return 0;
    for (p = handle; *p; p++) fields += *p == ' ';
    if (fields < 9) return 0;   /* not the proxy's layout (see handle_fields) */
    for (p = handle; index > 0; index--) p = strchr(p, ' ') + 1;
    for (; *p != ' '; p++, digits++) {
        if (*p < '0' || *p > '9' || digits >= 15) return 0;
        v = v * 10 + (*p - '0');
    }
    if (!digits) return 0;
    *out = v;
    return 1;
}

int mql_handle_pop_ms(const char *handle, int64_t *pop_ms) {
    return handle_number(handle, 1, pop_ms);
}

int mql_handle_invisible_ms(const char *handle, int64_t *invisible_ms) {
    return handle_number(handle, 2, invisible_ms);
}

/* ---------------------------------------------- request fields from values */

void mql_set_resource(mql_pb_resource *r, const char *ns, const char *name) {
    apache__rocketmq__v2__resource__init(r);
    r->resource_namespace = (char *)(ns ? ns : "");
    r->name = (char *)(name ? name : "");
}

void mql_set_duration(Google__Protobuf__Duration *d, int64_t ms) {
    google__protobuf__duration__init(d);
    d->seconds = ms / 1000;
    d->nanos = (int32_t)((ms % 1000) * 1000000);
}

void mql_set_timestamp(Google__Protobuf__Timestamp *t, int64_t epoch_ms) {
    google__protobuf__timestamp__init(t);
    t->seconds = epoch_ms / 1000;
    t->nanos = (int32_t)((epoch_ms % 1000) * 1000000);
}
