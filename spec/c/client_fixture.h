/* client_fixture.h -- a consumer for server-free C tests of the client's
 * stages: ready, its channel pointing nowhere (grpc connects lazily, so
 * nothing goes out unless a call starts, and no call ever ends on its own:
 * the test hands replies to the ops a stage gave its call, as the client
 * thread would). */
#ifndef CLIENT_FIXTURE_H
#define CLIENT_FIXTURE_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mql_call.h"
#include "mql_base.h"
#include "mql_change.h"
#include "mql_client.h"
#include "mql_receive.h"
#include "mql_release.h"
#include "mql_renew.h"
#include "mql_session.h"

/* A ready consumer whose channel points nowhere. */
static char fixture_broker_a[] = "broker-a";
static char *fixture_brokers[] = {fixture_broker_a};

static void fixture_client_init(mql_client *c) {
    grpc_channel_credentials *cr;
    memset(c, 0, sizeof(*c));
    grpc_init();
    c->type = MQL_CONSUMER;
    c->state = MQL_CLIENT_READY;
    c->endpoint = "127.0.0.1:1";
    c->request_timeout_ms = 1000;
    c->rand_state = 42;
    c->id.client_id = "receive-caps-test";
    c->consumer.group = "g";
    c->consumer.topic = "t";
    c->consumer.filter = "*";
    c->consumer.brokers = fixture_brokers;
    c->consumer.nbrokers = 1;
    c->consumer.invisible_ms = 30000;
    c->consumer.renew_every_ms = 10000;
    c->consumer.renew = 1;
    c->consumer.max_renewals = -1;
    c->consumer.max_body = 1 << 20;
    mql_pace_init(&c->consumer.pace, 30000, 10000);
    mql_lease_table_init(&c->consumer.leases);
    pthread_mutex_init(&c->mu, NULL);
    mql_events_init(&c->events);
    c->cq = grpc_completion_queue_create_for_next(NULL);
    cr = grpc_insecure_credentials_create();
    c->access = c->broker = mql_call_channel_new(grpc_channel_create(c->endpoint, cr, NULL));
    grpc_channel_credentials_release(cr);
}

/* Cancels every call (and extra, one the test took out of the list), drains
 * the queue and frees what the fixture made. */
static void fixture_client_finish(mql_client *c, mql_call *extra) {
    mql_call *call;
    grpc_event ev;
    if (extra) mql_call_cancel(extra);
    mql_receive_end_waiting(c, "CLOSED", "receive: the client is closed");
    for (call = c->calls; call; call = call->next) mql_call_cancel(call);
    mql_call_channel_unref(c->access);
    grpc_completion_queue_shutdown(c->cq);
    do ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(c->cq);
    /* each call ends as the client thread would end it after a cancel: its
     * own ops run and free what they hold */
    while ((call = c->calls)) {
        mql_base_unlink(c, call);
        call->status = GRPC_STATUS_CANCELLED;
        call->ops->on_done(c, call);
        mql_call_free(call);
    }
    if (extra) mql_call_free(extra);
    mql_release_drop_deferred(c);
    mql_lease_table_free(&c->consumer.leases);
    free(c->consumer.renew_held);
    mql_events_destroy(&c->events);
    pthread_mutex_destroy(&c->mu);
    grpc_shutdown();
}

/* msg packed into a byte buffer, as a reply arrives (the caller destroys it). */
/* A ready client (fixture_client_init) whose session has lost its proxy
 * (`reconnecting`: releases and renewals wait for the new one's settings),
 * holding one lease of M1 with remaining_ms left, its timer at
 * now + timer_in_ms; returns the lease. */
static inline mql_lease *fixture_reconnecting_lease(mql_client *c, int64_t remaining_ms,
                                                    int64_t timer_in_ms) {
    int64_t now;
    mql_lease *l;
    fixture_client_init(c);
    c->host = "127.0.0.1";
    c->port = 1;
    c->nendpoints = 1;
    c->request_timeout_ms = 3000;
    c->reconnecting = 1;
    now = mql_now_ms();
    l = mql_lease_add(&c->consumer.leases, "M1", "t", "h1", now - 1000, 30000);
    l->deadline_ms = now + remaining_ms;
    mql_lease_arm(&c->consumer.leases, l, now + timer_in_ms);
    return l;
}

static inline grpc_byte_buffer *fixture_pack(const ProtobufCMessage *msg) {
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);
    grpc_slice s;
    grpc_byte_buffer *bb;
    protobuf_c_message_pack(msg, buf);
    s = grpc_slice_from_copied_buffer((const char *)buf, len);
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    free(buf);
    return bb;
}

/* The result of op among the events (taken and freed): 1 ok, 0 failed, -1 none. */
static inline int fixture_op_result(mql_client *c, uint64_t op, char *code, size_t codelen) {
    mql_event *ev = mql_events_take(&c->events), *next;
    int found = -1;
    for (; ev; ev = next) {
        next = ev->next;
        if (ev->kind == MQL_EV_OP && ev->op == op) {
            found = ev->result.ok ? 1 : 0;
            if (code) snprintf(code, codelen, "%s", ev->result.code);
        }
        mql_event_free(ev);
    }
    return found;
}

/* The session's reconnect as its timers run it, and the proxy answering the
 * new stream with the settings it stored for us; 0 if no stream was opened. */
static inline int fixture_reconnect_completes(mql_client *c) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__Settings s = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    grpc_byte_buffer *bb;
    int64_t now = mql_now_ms();
    c->telemetry_retry_at = now - 1;
    mql_session_timers(c, now, now + 60000);
    if (!c->telemetry) return 0;   /* no stream opened */
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    cmd.settings = &s;
    bb = fixture_pack(&cmd.base);
    c->telemetry->ops->on_message(c, c->telemetry, bb);
    grpc_byte_buffer_destroy(bb);
    return 1;
}

/* Calls a test ended by hand (fixture_finish_call): out of the client's
 * list, kept until fixture_teardown cancels and frees them. */
#define FIXTURE_MAX_DONE 8
static mql_call *fixture_done_calls[FIXTURE_MAX_DONE];
static size_t fixture_ndone;

/* Ends the newest call as the hub would: with a transport status, or (OK)
 * with reply, packed, as its body. */
static inline void fixture_finish_call(mql_client *c, grpc_status_code status,
                                       const ProtobufCMessage *reply) {
    mql_call *call = c->calls;
    if (!call || fixture_ndone == FIXTURE_MAX_DONE) return;
    mql_base_unlink(c, call);
    call->status = status;
    if (reply) call->recv_buf = fixture_pack(reply);
    call->ops->on_done(c, call);
    /* grpc's pending receive would overwrite it when the call is cancelled */
    if (call->recv_buf) grpc_byte_buffer_destroy(call->recv_buf);
    call->recv_buf = NULL;
    fixture_done_calls[fixture_ndone++] = call;
}

/* Ends a case: the calls it ended by hand, then the client. */
static inline void fixture_teardown(mql_client *c) {
    size_t i;
    for (i = 0; i < fixture_ndone; i++) mql_call_cancel(fixture_done_calls[i]);
    fixture_client_finish(c, NULL);
    for (i = 0; i < fixture_ndone; i++) mql_call_free(fixture_done_calls[i]);
    fixture_ndone = 0;
}

#endif /* CLIENT_FIXTURE_H */
