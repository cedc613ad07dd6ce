/* session_test.c -- the session's handlers driven by hand, without a server:
 * a finished call is built with the reply a proxy would have sent and given to
 * the handler the client thread would run, on a client whose channel points
 * nowhere (grpc connects lazily, so nothing goes out unless a call starts). */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stdlib.h>
#include <string.h>

#include "mql_call.h"
#include "mql_base.h"
#include "mql_session.h"
#include "mql_test.h"

/* A QueryRoute reply "OK, one readable queue on 127.0.0.1:1" as a byte buffer. */
static grpc_byte_buffer *route_reply(void) {
    Apache__Rocketmq__V2__QueryRouteResponse resp = APACHE__ROCKETMQ__V2__QUERY_ROUTE_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    Apache__Rocketmq__V2__MessageQueue q = APACHE__ROCKETMQ__V2__MESSAGE_QUEUE__INIT, *qs[1] = {&q};
    Apache__Rocketmq__V2__Broker b = APACHE__ROCKETMQ__V2__BROKER__INIT;
    Apache__Rocketmq__V2__Endpoints ep = APACHE__ROCKETMQ__V2__ENDPOINTS__INIT;
    Apache__Rocketmq__V2__Address a = APACHE__ROCKETMQ__V2__ADDRESS__INIT, *as[1] = {&a};
    uint8_t buf[512];
    size_t len;
    grpc_slice s;
    grpc_byte_buffer *bb;
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    a.host = "127.0.0.1";
    a.port = 1;
    ep.n_addresses = 1;
    ep.addresses = as;
    b.name = "broker-a";
    b.endpoints = &ep;
    q.broker = &b;
    q.permission = APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE;
    resp.status = &st;
    resp.n_message_queues = 1;
    resp.message_queues = qs;
    len = protobuf_c_message_pack(&resp.base, buf);
    s = grpc_slice_from_copied_buffer((const char *)buf, len);
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* A client of the given type whose channel points nowhere: grpc connects
 * lazily, so nothing goes out unless a call starts. */
static void client_init(mql_client *c, mql_client_type type) {
    grpc_channel_credentials *cr;
    memset(c, 0, sizeof(*c));
    grpc_init();
    c->type = type;
    c->endpoint = "127.0.0.1:1";
    c->host = "127.0.0.1";
    c->port = 1;
    c->nendpoints = 1;
    c->request_timeout_ms = 1000;
    c->rand_state = 42;
    c->id.client_id = "session-test";
    c->cq = grpc_completion_queue_create_for_next(NULL);
    cr = grpc_insecure_credentials_create();
    c->access = c->broker = grpc_channel_create(c->endpoint, cr, NULL);
    grpc_channel_credentials_release(cr);
}

/* What close does: cancel every call, drain the queue, free what is left. */
static void client_finish(mql_client *c) {
    mql_call *call;
    grpc_event ev;
    for (call = c->calls; call; call = call->next) mql_call_cancel(call);
    grpc_channel_destroy(c->access);
    grpc_completion_queue_shutdown(c->cq);
    do ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(c->cq);
    while ((call = c->calls)) {
        mql_base_unlink(c, call);
        mql_call_free(call);
    }
    free(c->consumer.broker_name);
    mql_call_identity_clear(&c->id);
    grpc_shutdown();
}

/* Defect 5 of issue 10: close() cancels every call in c->calls and joins the
 * thread once none is left. A route reply that had already arrived when close
 * cancelled reaches the thread afterwards as a success; the handler went on to
 * open Telemetry, a stream with no deadline, which close had not cancelled, so
 * the thread waited for it forever. Once stopping, no call may start. */
static void a_route_reply_after_close_opens_no_telemetry_stream(void) {
    mql_client c;
    mql_call *route;
    const mql_call_ops *route_ops;
    client_init(&c, MQL_CONSUMER);
    c.consumer.group = "g";
    c.consumer.topic = "t";
    c.consumer.filter = "*";

    /* the session's own route call carries the ops its reply runs; that call
     * stays in flight to nowhere (cancelled at the end), a copy is answered */
    mql_session_begin(&c);
    CHECK(c.calls != NULL && c.calls->next == NULL);
    if (!c.calls) return;
    route_ops = c.calls->ops;
    route = mql_call_new(c.access, c.cq, MQL_M_QUERY_ROUTE, 1000, &c.id);
    route->owner = &c;
    route->ops = route_ops;
    route->status = GRPC_STATUS_OK;
    route->recv_buf = route_reply();
    c.stopping = 1;                      /* close() ran between the reply and its handler */
    route->ops->on_done(&c, route);
    /* taken as a success */
    CHECK(c.consumer.broker_name && strcmp(c.consumer.broker_name, "broker-a") == 0);
    CHECK(c.calls != NULL && c.calls->next == NULL);   /* only the first route call */
    CHECK(c.telemetry == NULL);
    mql_call_free(route);
    client_finish(&c);   /* ends cleanly even if a stream opened */
}

static uint64_t errors_of(const mql_client *c, const char *op, const char *code) {
    int i;
    for (i = 0; i < c->metrics.nerrors; i++)
        if (strcmp(c->metrics.errors[i].op, op) == 0 && strcmp(c->metrics.errors[i].code, code) == 0)
            return c->metrics.errors[i].n;
    return 0;
}

/* A started session whose proxy was lost re-opens Telemetry and waits for the
 * proxy to answer its settings. A proxy that accepts the stream and never
 * answers (hung, or a middlebox that holds streams) left the session
 * `reconnecting` for good: the stream has no deadline of its own. The answer
 * is due within request_timeout; past it the stream is cancelled, counted as
 * telemetry TIMEOUT, and the next attempt follows the backoff. */
static void a_reconnect_whose_settings_never_come_back_is_given_up(void) {
    mql_client c;
    int64_t now, wake;
    client_init(&c, MQL_PRODUCER);
    mql_backoff_init(&c.reconnect, 200, 10000);
    c.state = MQL_CLIENT_READY;
    c.reconnecting = 1;                  /* its stream ended; the retry is due */
    now = mql_now_ms();
    c.telemetry_retry_at = now - 1;

    mql_session_timers(&c, now, now + 60000);
    CHECK(c.telemetry != NULL);          /* the stream is open, the settings sent */
    CHECK(c.reconnecting);
    /* no answer: a moment past request_timeout the attempt is given up */
    wake = mql_session_timers(&c, now + 500, now + 60000);
    CHECK(errors_of(&c, "telemetry", "TIMEOUT") == 0);
    CHECK(wake <= now + 1500);           /* the thread wakes for the due answer */
    mql_session_timers(&c, now + 1500, now + 60000);
    CHECK(errors_of(&c, "telemetry", "TIMEOUT") == 1);
    CHECK(c.reconnecting);               /* still reconnecting: the stream's end schedules the next try */
    mql_session_timers(&c, now + 5000, now + 60000);
    CHECK(errors_of(&c, "telemetry", "TIMEOUT") == 1);   /* given up once, not at every tick */

    client_finish(&c);
}

/* The stream given up above ends as CANCELLED, by our own hand: that end is
 * the same failure, already counted as TIMEOUT, and must not be counted again
 * (mqlease_errors_total{op="telemetry"} read 2 per give-up). A stream the
 * server ends is still counted. */
static void a_given_up_stream_is_counted_once(void) {
    mql_client c;
    mql_call *stream;
    int64_t now;
    client_init(&c, MQL_PRODUCER);
    mql_backoff_init(&c.reconnect, 200, 10000);
    c.state = MQL_CLIENT_READY;
    c.reconnecting = 1;
    now = mql_now_ms();
    c.telemetry_retry_at = now - 1;
    mql_session_timers(&c, now, now + 60000);
    stream = c.telemetry;
    CHECK(stream != NULL);
    mql_session_timers(&c, now + 1500, now + 60000);    /* given up: TIMEOUT, stream cancelled */
    CHECK(errors_of(&c, "telemetry", "TIMEOUT") == 1);

    stream->status = GRPC_STATUS_CANCELLED;             /* its end, as the client thread sees it */
    stream->ops->on_done(&c, stream);
    CHECK(errors_of(&c, "telemetry", "CANCELLED") == 0);
    CHECK(c.telemetry_retry_at != 0);                    /* the next attempt is scheduled */

    /* the next stream, ended by the server, is a failure of its own */
    c.telemetry_retry_at = now - 1;
    mql_session_timers(&c, now + 1600, now + 60000);
    stream = c.telemetry;
    CHECK(stream != NULL);
    stream->status = GRPC_STATUS_UNAVAILABLE;
    stream->ops->on_done(&c, stream);
    CHECK(errors_of(&c, "telemetry", "UNAVAILABLE") == 1);
    CHECK(errors_of(&c, "telemetry", "TIMEOUT") == 1);

    client_finish(&c);
}

static const grpc_arg *arg_named(const grpc_arg *args, size_t n, const char *key) {
    size_t i;
    for (i = 0; i < n; i++)
        if (strcmp(args[i].key, key) == 0) return &args[i];
    return NULL;
}

/* Every channel leaves grpc's retry layer and channelz off (the retry layer
 * copies each call's headers and message, a fifth of a renewal's CPU; issue
 * 24) and keeps the receive limit, the keepalive and our reconnect cap. */
static void channels_have_no_retry_layer_and_keep_their_limits(void) {
    mql_client c;
    grpc_arg args[MQL_CHANNEL_ARGS_MAX];
    const grpc_arg *a;
    size_t n;
    memset(&c, 0, sizeof(c));
    n = mql_session_channel_args(&c, args);
    CHECK(n <= MQL_CHANNEL_ARGS_MAX);
    a = arg_named(args, n, GRPC_ARG_ENABLE_RETRIES);
    CHECK(a && a->type == GRPC_ARG_INTEGER && a->value.integer == 0);
    a = arg_named(args, n, GRPC_ARG_ENABLE_CHANNELZ);
    CHECK(a && a->type == GRPC_ARG_INTEGER && a->value.integer == 0);
    a = arg_named(args, n, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH);
    CHECK(a && a->value.integer == 130 * 1024 * 1024);
    a = arg_named(args, n, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS);
    CHECK(a && a->value.integer == MQL_BACKOFF_CAP_MS);
    CHECK(arg_named(args, n, GRPC_ARG_KEEPALIVE_TIME_MS) != NULL);
    CHECK(arg_named(args, n, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG) == NULL);
    c.tls = 1;
    c.tls_server_name = "proxy.example";
    n = mql_session_channel_args(&c, args);
    CHECK(n <= MQL_CHANNEL_ARGS_MAX);
    a = arg_named(args, n, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG);
    CHECK(a && a->type == GRPC_ARG_STRING && strcmp(a->value.string, "proxy.example") == 0);
}

int main(void) {
    RUN(channels_have_no_retry_layer_and_keep_their_limits);
    RUN(a_route_reply_after_close_opens_no_telemetry_stream);
    RUN(a_reconnect_whose_settings_never_come_back_is_given_up);
    RUN(a_given_up_stream_is_counted_once);
    return TEST_REPORT("session_test");
}
