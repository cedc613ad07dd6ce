/* mql_receive.c -- where a message enters: ReceiveMessage.
 *
 * A receive is a server stream the proxy answers as: a status, then the
 * messages, then a delivery timestamp. Each message becomes a lease in the
 * table the moment it arrives (before the host sees it), with its first
 * renewal armed, so a host that is slow to pick its messages up never lets
 * one expire. The stream's gRPC deadline must outlast the long poll, and the
 * proxy never polls for less than 5 s.
 *
 * Every function here runs with c->mu held unless it says otherwise.
 */
#include "mql_client_private.h"

#include <stdlib.h>
#include <string.h>

#define MIN_PROXY_POLL_MS 5000   /* grpcClientConsumerMinLongPollingTimeoutMillis */

typedef struct receive_ctx {
    mql_message *msgs;
    size_t n, cap;
    mql_result status;
    int have_status;
} receive_ctx;

void mql_receive_on_message(mql_client *c, mql_call *call, grpc_byte_buffer *reply) {
    receive_ctx *rx = call->ctx;
    Apache__Rocketmq__V2__ReceiveMessageResponse *resp = (void *)mql_unpack(
        &apache__rocketmq__v2__receive_message_response__descriptor, reply);
    if (!resp) return;
    if (resp->content_case == APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_STATUS) {
        mql_result_from_status(&rx->status, resp->status, "ReceiveMessage");
        rx->have_status = 1;
    } else if (resp->content_case ==
               APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_MESSAGE) {
        const Apache__Rocketmq__V2__Message *pm = resp->message;
        const char *handle = pm->system_properties ? pm->system_properties->receipt_handle : NULL;
        mql_message *m;
        mql_lease *l;
        if (rx->n == rx->cap) {
            rx->cap = rx->cap ? rx->cap * 2 : 8;
            rx->msgs = realloc(rx->msgs, rx->cap * sizeof(*rx->msgs));
            if (!rx->msgs) abort();
        }
        m = &rx->msgs[rx->n++];
        mql_message_from_pb(m, pm);
        /* The lease starts now: from here on the message is renewed whatever the
         * host does, until it is acked, released or its budget is spent. */
        l = mql_lease_add(&c->leases, m->id, m->topic, handle, mql_now_ms(), c->invisible_ms);
        mql_lease_arm(&c->leases, l, c->renew ? mql_renew_next_at(c, l->acquired_ms) : l->deadline_ms);
        m->lease_id = l->id;
        c->metrics.received++;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

void mql_receive_on_done(mql_client *c, mql_call *call) {
    receive_ctx *rx = call->ctx;
    mql_event *ev = mql_event_new(MQL_EV_OP, call->op);
    if (call->status != GRPC_STATUS_OK) {
        mql_call_result(call, NULL, &ev->result);
    } else if (rx->have_status) {
        ev->result = rx->status;
        if (!ev->result.ok && strcmp(ev->result.code, "MESSAGE_NOT_FOUND") == 0)
            mql_result_ok(&ev->result);   /* nothing within the long poll: an empty batch */
    } else {
        mql_result_fail(&ev->result, "PROTOCOL", "ReceiveMessage: the server sent no status");
    }
    /* Messages that arrived are leases now: hand them over whatever came after. */
    if (rx->n > 0) mql_result_ok(&ev->result);
    if (!ev->result.ok) mql_metrics_error(&c->metrics, "receive", ev->result.code);
    ev->msgs = rx->msgs;
    ev->nmsgs = rx->n;
    free(rx);
    call->ctx = NULL;
    mql_events_push(&c->events, ev);
}

uint64_t mql_client_receive(mql_client *c, int batch, int64_t await_ms) {
    Apache__Rocketmq__V2__ReceiveMessageRequest req =
        APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_REQUEST__INIT;
    Apache__Rocketmq__V2__MessageQueue mq = APACHE__ROCKETMQ__V2__MESSAGE_QUEUE__INIT;
    Apache__Rocketmq__V2__Broker broker = APACHE__ROCKETMQ__V2__BROKER__INIT;
    Apache__Rocketmq__V2__FilterExpression fe = APACHE__ROCKETMQ__V2__FILTER_EXPRESSION__INIT;
    mql_pb_resource group, topic;
    Google__Protobuf__Duration invisible, poll;
    mql_call *call;
    uint64_t op;

    pthread_mutex_lock(&c->mu);
    if (mql_client_refuses(c, MQL_CONSUMER, "receive", &op)) {
        pthread_mutex_unlock(&c->mu);
        return op;
    }
    op = ++c->next_op;
    mql_set_resource(&group, c->namespace_, c->group);
    mql_set_resource(&topic, c->namespace_, c->topic);
    broker.name = c->broker_name;
    mq.topic = &topic;
    mq.broker = &broker;
    mq.permission = APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE;
    fe.type = c->filter_sql ? APACHE__ROCKETMQ__V2__FILTER_TYPE__SQL
                            : APACHE__ROCKETMQ__V2__FILTER_TYPE__TAG;
    fe.expression = c->filter;
    mql_set_duration(&invisible, c->invisible_ms);
    mql_set_duration(&poll, await_ms);
    req.group = &group;
    req.message_queue = &mq;
    req.filter_expression = &fe;
    req.batch_size = batch;
    req.invisible_duration = &invisible;
    req.auto_renew = 0;   /* the lease is ours to renew, not the proxy's */
    req.long_polling_timeout = &poll;
    /* The proxy needs a deadline longer than the long poll, or it fails the
     * call; and it never polls for less than 5 s, whatever we ask. */
    call = mql_client_call(c, c->broker, MQL_M_RECEIVE,
                    (await_ms > MIN_PROXY_POLL_MS ? await_ms : MIN_PROXY_POLL_MS) +
                        c->request_timeout_ms,
                    MQL_K_RECEIVE, op,
                    mql_xcalloc(1, sizeof(receive_ctx)));
    if (mql_call_start_server_stream(call, &req.base) < 0) {
        free(call->ctx);
        mql_client_unlink(c, call);
        mql_call_free(call);
        pthread_mutex_unlock(&c->mu);
        return mql_post_refusal(c, "INTERNAL", "receive: grpc refused to start the call");
    }
    pthread_mutex_unlock(&c->mu);
    return op;
}

void mql_client_cancel_receives(mql_client *c) {
    mql_call *call;
    pthread_mutex_lock(&c->mu);
    for (call = c->calls; call; call = call->next)
        if (call->kind == MQL_K_RECEIVE) mql_call_cancel(call);
    pthread_mutex_unlock(&c->mu);
}

