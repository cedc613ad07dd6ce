/* mql_producer.c -- the producer's job: SendMessage (half messages too), and
 * RecallMessage to take a sent delay message back.
 *
 * A message id is minted here in the layout of the official clients (so ids
 * from mqlease and from Java producers look alike in dashboards), and each
 * send is one unary call whose entry answers the id, the queue offset and,
 * from a RocketMQ 5.3.2+ proxy, the recall handle.
 *
 * Every function here runs with c->mu held unless it says otherwise.
 */
#include "mql_producer.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_send_done(mql_client *c, mql_call *call);

static void on_recall_done(mql_client *c, mql_call *call);

static const mql_call_ops send_ops = {.on_done = on_send_done};
static const mql_call_ops recall_ops = {.on_done = on_recall_done};

static void make_message_id(mql_client *c, char *out) {
    /* The v1 layout of the official clients: 01 + node(6) + pid(2) + seconds
     * since 2021-01-01 (4) + sequence (4), 34 upper-case hex digits. */
    static const char digits[] = "0123456789ABCDEF";
    uint8_t b[17];
    uint32_t secs = (uint32_t)(mql_wall_ms() / 1000 - 1609459200);
    uint32_t seq = c->producer.id_seq++;
    uint16_t pid = (uint16_t)getpid();
    int i;
    b[0] = 1;
    memcpy(b + 1, c->producer.id_node, 6);
    b[7] = (uint8_t)(pid >> 8);
    b[8] = (uint8_t)pid;
    for (i = 0; i < 4; i++) b[9 + i] = (uint8_t)(secs >> (24 - 8 * i));
    for (i = 0; i < 4; i++) b[13 + i] = (uint8_t)(seq >> (24 - 8 * i));
    for (i = 0; i < 17; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[34] = '\0';
}

uint64_t mql_producer_send(mql_client *c, const char *topic_name, const uint8_t *body, size_t len,
                           const mql_send_opts *o) {
    Apache__Rocketmq__V2__SendMessageRequest req = APACHE__ROCKETMQ__V2__SEND_MESSAGE_REQUEST__INIT;
    Apache__Rocketmq__V2__Message msg = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    Apache__Rocketmq__V2__Message *msgs[1] = {&msg};
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Apache__Rocketmq__V2__Message__UserPropertiesEntry *pstore, **pptrs;
    Google__Protobuf__Timestamp born = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Timestamp deliver = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Duration recovery = GOOGLE__PROTOBUF__DURATION__INIT;
    mql_pb_resource topic;
    char id[35], *sent_id;
    int64_t now = mql_wall_ms();
    mql_call *call;
    uint64_t op;
    size_t i;

    op = ++c->next_op;
    make_message_id(c, id);
    mql_set_resource(&topic, c->namespace_, topic_name);
    pstore = mql_xcalloc(o->nprops, sizeof(*pstore));
    pptrs = mql_xcalloc(o->nprops, sizeof(*pptrs));
    for (i = 0; i < o->nprops; i++) {
        apache__rocketmq__v2__message__user_properties_entry__init(&pstore[i]);
        pstore[i].key = o->props[i].key;
        pstore[i].value.data = (uint8_t *)o->props[i].value;
        pstore[i].value.len = o->props[i].value_len ? o->props[i].value_len : strlen(o->props[i].value);
        pptrs[i] = &pstore[i];
    }
    mql_set_timestamp(&born, now);
    sp.tag = (char *)(o->tag ? o->tag : "");
    sp.n_keys = o->nkeys;
    sp.keys = (char **)o->keys;
    sp.message_id = id;
    sp.body_encoding = APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    /* the proxy checks the type against the topic's message.type attribute */
    sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL;
    if (o->transaction) {
        /* a half message: the proxy's SendMessageActivity marks it
         * TRANSACTION_PREPARED, and the topic names the producer group the
         * broker's check asks (ClientActivity.registerProducer) */
        sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__TRANSACTION;
        if (o->recovery_ms > 0) {
            /* PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: no check before it passes */
            mql_set_duration(&recovery, o->recovery_ms);
            sp.orphaned_transaction_recovery_duration = &recovery;
        }
    } else if (o->message_group) {
        sp.message_group = (char *)o->message_group;
        sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__FIFO;
    } else if (o->delivery_ms > 0) {
        mql_set_timestamp(&deliver, o->delivery_ms);
        sp.delivery_timestamp = &deliver;
        sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__DELAY;
    }
    /* RIP-80 (5.4+): the broker stores it in queue min(priority, queues - 1) of a
     * PRIORITY topic and drops it on other topics (SendMessageProcessor) */
    if (o->lite_topic) sp.lite_topic = (char *)o->lite_topic;   /* RIP-83 (5.5) */
    if (o->has_priority) {
        sp.n_priority = 1;
        sp.priority = (int32_t *)&o->priority;
        if (!o->message_group && o->delivery_ms <= 0)
            sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__PRIORITY;
    }
    /* as the official C++ client's ProducerImpl: set only when there is one */
    if (o->trace_context && o->trace_context[0]) sp.trace_context = (char *)o->trace_context;
    sp.born_timestamp = &born;
    sp.born_host = c->hostname;
    msg.topic = &topic;
    msg.system_properties = &sp;
    msg.n_user_properties = o->nprops;
    msg.user_properties = pptrs;
    msg.body.data = (uint8_t *)body;
    msg.body.len = len;
    req.n_messages = 1;
    req.messages = msgs;
    /* the call keeps the id it sent: the reply must name it (one_entry) */
    sent_id = mql_strdup(id);
    call = mql_base_call(c, c->broker, MQL_M_SEND, c->request_timeout_ms, &send_ops, op, sent_id);
    if (mql_base_unary(c, call, &req.base) < 0) {
        free(sent_id);   /* the refused call is freed without on_send_done */
        op = mql_base_post_refusal(c, "INTERNAL", "send: grpc refused to start the call");
    }
    free(pstore);
    free(pptrs);
    return op;
}

/* The one entry of a send's reply, or NULL with r failed PROTOCOL. A send is
 * one message, which the proxy answers with one SendResultEntry naming the
 * message's id (org.apache.rocketmq.proxy.grpc.v2.producer.SendMessageActivity):
 * another count, or an OK without an id, is no answer to hand on as "stored
 * under this id" (an empty id was, printed by `mqlease send`). The id is the
 * one sent (sent_id): the proxy answers the message's UNIQ_KEY, which it set
 * from system_properties.message_id (MessageClientIDSetter.getUniqID, in
 * LocalMessageService and in the remote client's SendResult alike); an OK
 * naming another message says nothing of this one, and was handed on as its
 * id (a transaction committed that other message). */
static const Apache__Rocketmq__V2__SendResultEntry *
one_entry(const Apache__Rocketmq__V2__SendMessageResponse *resp, const char *sent_id, mql_result *r) {
    const Apache__Rocketmq__V2__SendResultEntry *e;
    if (resp->n_entries != 1) {
        mql_result_fail(r, "PROTOCOL", "SendMessage: the server sent %zu entries for one message",
                        resp->n_entries);
        return NULL;
    }
    e = resp->entries[0];
    if (e->status) mql_result_from_status(r, e->status, "SendMessage");
    if (r->ok && !(e->message_id && e->message_id[0])) {
        mql_result_fail(r, "PROTOCOL", "SendMessage: the server answered OK without a message id "
                                       "(the message may be stored)");
        return NULL;
    }
    if (r->ok && sent_id && strcmp(e->message_id, sent_id) != 0) {
        mql_result_fail(r, "PROTOCOL", "SendMessage: the server answered OK for message %.64s, not for %s "
                                       "(the message may be stored)", e->message_id, sent_id);
        return NULL;
    }
    return e;
}

static void on_send_done(mql_client *c, mql_call *call) {
    mql_event *ev = mql_event_new(MQL_EV_OP, call->op);
    Apache__Rocketmq__V2__SendMessageResponse *resp =
        mql_call_reply(call, &apache__rocketmq__v2__send_message_response__descriptor, &ev->result);
    const Apache__Rocketmq__V2__SendResultEntry *e =
        ev->result.ok ? one_entry(resp, call->ctx, &ev->result) : NULL;
    free(call->ctx);
    call->ctx = NULL;
    if (e) {
        ev->message_id = mql_strdup(e->message_id ? e->message_id : "");
        ev->offset = e->offset;
        if (e->recall_handle && e->recall_handle[0]) ev->recall_handle = mql_strdup(e->recall_handle);
        if (e->transaction_id && *e->transaction_id) ev->transaction_id = mql_strdup(e->transaction_id);
    }
    if (ev->result.ok) c->metrics.sent_ok++;
    else {
        c->metrics.sent_fail++;
        mql_metrics_error(&c->metrics, "send", ev->result.code);
    }
    mql_call_reply_free(resp);
    mql_events_push(&c->events, ev);
}

uint64_t mql_producer_recall(mql_client *c, const char *topic_name, const char *handle) {
    Apache__Rocketmq__V2__RecallMessageRequest req = APACHE__ROCKETMQ__V2__RECALL_MESSAGE_REQUEST__INIT;
    mql_pb_resource topic;
    mql_call *call;
    uint64_t op = ++c->next_op;
    mql_set_resource(&topic, c->namespace_, topic_name);
    req.topic = &topic;
    req.recall_handle = (char *)handle;
    call = mql_base_call(c, c->broker, MQL_M_RECALL, c->request_timeout_ms, &recall_ops, op, NULL);
    if (mql_base_unary(c, call, &req.base) < 0)
        op = mql_base_post_refusal(c, "INTERNAL", "recall: grpc refused to start the call");
    return op;
}

/* A proxy before 5.3.2 has no such method: the call ends UNIMPLEMENTED. */
static void on_recall_done(mql_client *c, mql_call *call) {
    mql_event *ev = mql_event_new(MQL_EV_OP, call->op);
    Apache__Rocketmq__V2__RecallMessageResponse *resp =
        mql_call_reply(call, &apache__rocketmq__v2__recall_message_response__descriptor, &ev->result);
    if (ev->result.ok) ev->message_id = mql_strdup(resp->message_id ? resp->message_id : "");
    else mql_metrics_error(&c->metrics, "recall", ev->result.code);
    mql_call_reply_free(resp);
    mql_events_push(&c->events, ev);
}
