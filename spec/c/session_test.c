/* session_test.c -- the session's handlers driven by hand, without a server:
 * a finished call is built with the reply a proxy would have sent and given to
 * the handler the client thread would run, on a client whose channel points
 * nowhere (grpc connects lazily, so nothing goes out unless a call starts). */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mql_call.h"
#include "mql_base.h"
#include "mql_endpoint.h"
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

/* A route of two brokers, as a cluster's proxy answers for a topic with queues
 * on broker-a and broker-b: two queues each, interleaved, plus a slave's
 * queue (id 1, "broker-c") and a write-only one ("broker-d"), which nobody
 * may receive from. */
static grpc_byte_buffer *two_broker_route_reply(void) {
    Apache__Rocketmq__V2__QueryRouteResponse resp = APACHE__ROCKETMQ__V2__QUERY_ROUTE_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    Apache__Rocketmq__V2__MessageQueue q[6], *qs[6];
    Apache__Rocketmq__V2__Broker b[4];
    Apache__Rocketmq__V2__Endpoints ep = APACHE__ROCKETMQ__V2__ENDPOINTS__INIT;
    Apache__Rocketmq__V2__Address a = APACHE__ROCKETMQ__V2__ADDRESS__INIT, *as[1] = {&a};
    static char *names[4] = {"broker-a", "broker-b", "broker-c", "broker-d"};
    static const int of[6] = {0, 1, 0, 1, 2, 3};   /* queue i belongs to broker of[i] */
    uint8_t buf[1024];
    size_t len, i;
    grpc_slice s;
    grpc_byte_buffer *bb;
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    a.host = "127.0.0.1";
    a.port = 1;
    ep.n_addresses = 1;
    ep.addresses = as;
    for (i = 0; i < 4; i++) {
        apache__rocketmq__v2__broker__init(&b[i]);
        b[i].name = names[i];
        b[i].endpoints = &ep;
        b[i].id = i == 2 ? 1 : 0;
    }
    for (i = 0; i < 6; i++) {
        apache__rocketmq__v2__message_queue__init(&q[i]);
        q[i].broker = &b[of[i]];
        q[i].id = (int32_t)i;
        q[i].permission = of[i] == 3 ? APACHE__ROCKETMQ__V2__PERMISSION__WRITE
                                     : APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE;
        qs[i] = &q[i];
    }
    resp.status = &st;
    resp.n_message_queues = 6;
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
    c->access = c->broker = mql_call_channel_new(grpc_channel_create(c->endpoint, cr, NULL));
    grpc_channel_credentials_release(cr);
}

/* What close does: cancel every call, drain the queue, free what is left. */
static void client_finish(mql_client *c) {
    mql_call *call;
    grpc_event ev;
    for (call = c->calls; call; call = call->next) mql_call_cancel(call);
    if (c->broker != c->access) mql_call_channel_unref(c->broker);
    mql_call_channel_unref(c->access);
    grpc_completion_queue_shutdown(c->cq);
    do ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(c->cq);
    while ((call = c->calls)) {
        mql_base_unlink(c, call);
        mql_call_free(call);
    }
    for (size_t i = 0; i < c->consumer.nbrokers; i++) free(c->consumer.brokers[i]);
    free(c->consumer.brokers);
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
    CHECK(c.consumer.nbrokers == 1 && strcmp(c.consumer.brokers[0], "broker-a") == 0);
    CHECK(c.calls != NULL && c.calls->next == NULL);   /* only the first route call */
    CHECK(c.telemetry == NULL);
    mql_call_free(route);
    client_finish(&c);   /* ends cleanly even if a stream opened */
}

/* Several brokers: the proxy pops from the broker a receive names
 * (ReceiveMessageActivity.ReceiveMessageQueueSelector), and the session kept
 * only the route's first broker, so a consumer never received what the other
 * brokers of the topic held. Now it keeps every readable master, once each, in
 * route order (receive_caps_test: the receives take turns naming them). */
static void a_route_of_two_brokers_keeps_both_readable_masters(void) {
    mql_client c;
    mql_call *route;
    const mql_call_ops *route_ops;
    client_init(&c, MQL_CONSUMER);
    c.consumer.group = "g";
    c.consumer.topic = "t";
    c.consumer.filter = "*";
    mql_session_begin(&c);
    CHECK(c.calls != NULL);
    if (!c.calls) return;
    route_ops = c.calls->ops;
    route = mql_call_new(c.access, c.cq, MQL_M_QUERY_ROUTE, 1000, &c.id);
    route->owner = &c;
    route->ops = route_ops;
    route->status = GRPC_STATUS_OK;
    route->recv_buf = two_broker_route_reply();
    c.stopping = 1;   /* no Telemetry: only the route's handling is looked at */
    route->ops->on_done(&c, route);
    CHECK(c.consumer.nbrokers == 2);
    CHECK(c.consumer.nbrokers >= 1 && strcmp(c.consumer.brokers[0], "broker-a") == 0);
    CHECK(c.consumer.nbrokers >= 2 && strcmp(c.consumer.brokers[1], "broker-b") == 0);
    mql_call_free(route);
    client_finish(&c);
}

/* The route is asked again every 30 s (the Java client's route cache): a
 * broker that was down when the consumer started, or joined the topic later,
 * is received from once the route lists it. The refresh changes only the
 * brokers: no Telemetry stream, no event for the host. */
static void the_route_is_refreshed_and_brings_a_broker_that_joined(void) {
    mql_client c;
    mql_call *route;
    client_init(&c, MQL_CONSUMER);
    c.consumer.group = "g";
    c.consumer.topic = "t";
    c.consumer.filter = "*";
    c.state = MQL_CLIENT_READY;
    c.consumer.brokers = mql_xcalloc(1, sizeof(char *));
    c.consumer.brokers[0] = mql_strdup("broker-a");
    c.consumer.nbrokers = 1;
    c.route_refresh_at = 1000;
    mql_session_timers(&c, 999, 5000);
    CHECK(c.calls == NULL);   /* not due yet */
    CHECK(mql_session_timers(&c, 1000, 90000) <= 1000 + 30000);
    CHECK(c.calls != NULL && strcmp(c.calls->method, MQL_M_QUERY_ROUTE) == 0);
    CHECK(c.route_refresh_at == 1000 + 30000);
    if (!c.calls) return;
    route = mql_call_new(c.access, c.cq, MQL_M_QUERY_ROUTE, 1000, &c.id);
    route->owner = &c;
    route->ops = c.calls->ops;
    route->op = c.calls->op;
    route->status = GRPC_STATUS_OK;
    route->recv_buf = two_broker_route_reply();
    route->ops->on_done(&c, route);
    CHECK(c.consumer.nbrokers == 2);
    CHECK(c.consumer.nbrokers == 2 && strcmp(c.consumer.brokers[1], "broker-b") == 0);
    CHECK(c.telemetry == NULL);
    CHECK(mql_events_take(&c.events) == NULL);
    mql_call_free(route);
    client_finish(&c);
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
    n = mql_endpoint_channel_args(&c, args);
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
    n = mql_endpoint_channel_args(&c, args);
    CHECK(n <= MQL_CHANNEL_ARGS_MAX);
    a = arg_named(args, n, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG);
    CHECK(a && a->type == GRPC_ARG_STRING && strcmp(a->value.string, "proxy.example") == 0);
}


/* Issue 33 item 6: proxy 1 died, and proxy 2 answered slowly (a cold JVM on a
 * loaded box). Each attempt moved to the next endpoint whatever the failure:
 * the route to proxy 2 ran out of time, and the next attempt went to the dead
 * proxy 1, threw away the channel to proxy 2 and doubled the backoff. Only
 * a connection failure moves on; a timeout tries the same proxy with twice
 * the deadline, and moves on only once the longest deadline ran out too. */
static void only_a_connection_failure_moves_to_the_next_endpoint(void) {
    size_t at = 0;
    int64_t call_ms = 0, before;
    mql_session_retry_plan(2, "UNAVAILABLE", 2000, &at, &call_ms);
    CHECK(at == 1 && call_ms == 0);                 /* the dead proxy: the next one */
    mql_session_retry_plan(2, "TIMEOUT", 2000, &at, &call_ms);
    CHECK(at == 1 && call_ms == 4000);              /* a slow one: again, given longer */
    mql_session_retry_plan(2, "TIMEOUT", 2000, &at, &call_ms);
    CHECK(at == 1 && call_ms == 8000);
    mql_session_retry_plan(2, "TIMEOUT", 2000, &at, &call_ms);
    CHECK(at == 1 && call_ms == MQL_BACKOFF_CAP_MS);
    before = call_ms;
    mql_session_retry_plan(2, "INTERNAL_SERVER_ERROR", 2000, &at, &call_ms);
    CHECK(at == 1 && call_ms == before);           /* it answered: it stays */
    mql_session_retry_plan(2, "TIMEOUT", 2000, &at, &call_ms);
    CHECK(at == 0 && call_ms == 0);                 /* silent even then: the next one */
    mql_session_retry_plan(2, "UNAVAILABLE", 2000, &at, &call_ms);
    CHECK(at == 1);                                 /* wrapping around */
    at = 0;
    mql_session_retry_plan(1, "UNAVAILABLE", 2000, &at, &call_ms);
    CHECK(at == 0);                                 /* one endpoint: always that one */
}

/* The same, driven through the session's timers: a consumer whose route to
 * the proxy it moved to timed out asks that proxy again, on the same channel. */
static void a_timed_out_route_is_asked_again_of_the_same_proxy(void) {
    mql_client c;
    mql_channel *ch;
    char err[MQL_ERRLEN];
    int64_t now = mql_now_ms();
    client_init(&c, MQL_CONSUMER);
    c.consumer.group = "g";
    c.consumer.topic = "t";
    c.consumer.filter = "*";
    c.endpoint = c.host = NULL;
    c.endpoint_list = "127.0.0.1:1;127.0.0.1:2";
    CHECK(mql_endpoint_list_init(&c, err, sizeof(err)) == 0);
    mql_backoff_init(&c.reconnect, 200, 10000);
    c.state = MQL_CLIENT_READY;
    c.reconnecting = 1;
    c.reconnect_route = 1;
    snprintf(c.reconnect_code, sizeof(c.reconnect_code), "%s", "TIMEOUT");
    c.endpoint_at = 1;
    free(c.endpoint);
    c.endpoint = mql_strdup("127.0.0.1:2");
    ch = c.access;
    c.telemetry_retry_at = now - 1;
    mql_session_timers(&c, now, now + 60000);
    CHECK(c.endpoint_at == 1 && strcmp(c.endpoint, "127.0.0.1:2") == 0);
    CHECK(c.access == ch);                          /* the channel kept */
    CHECK(c.calls != NULL && strcmp(c.calls->method, MQL_M_QUERY_ROUTE) == 0);
    CHECK(c.reconnect_call_ms == 2000);             /* twice request_timeout */
    client_finish(&c);
    free(c.endpoint);
    free(c.host);
}

/* A socket that takes connections (the kernel's backlog) and never answers:
 * a proxy that is stopped or busy. Its port in *port. */
static int silent_listener(int *port) {
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static void on_test_call_done(mql_client *c, mql_call *call) { (void)c; (void)call; }
static const mql_call_ops test_call_ops = {.on_done = on_test_call_done};

/* Issue 33 item 6: a move to another proxy destroyed the channel in use,
 * and grpc_channel_destroy fails every call still on it ("Channel
 * Destroyed"): receives, acks and renewals out to a live proxy failed, acks
 * let leases expire (the message ran twice) and a popped receive's messages
 * stayed invisible. The replaced channel lives on until its last call ends. */
static void a_replaced_channel_keeps_the_calls_in_flight_on_it(void) {
    mql_client c;
    mql_channel *old;
    mql_call *call;
    Apache__Rocketmq__V2__HeartbeatRequest req = APACHE__ROCKETMQ__V2__HEARTBEAT_REQUEST__INIT;
    grpc_event ev;
    char list[64], err[MQL_ERRLEN];
    int p1, p2, fd1 = silent_listener(&p1), fd2 = silent_listener(&p2);
    int64_t now = mql_now_ms();
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    CHECK(fd1 >= 0 && fd2 >= 0);
    client_init(&c, MQL_PRODUCER);
    snprintf(list, sizeof(list), "127.0.0.1:%d;127.0.0.1:%d", p1, p2);
    c.endpoint = c.host = NULL;
    c.endpoint_list = list;
    CHECK(mql_endpoint_list_init(&c, err, sizeof(err)) == 0);
    mql_call_channel_unref(c.access);
    c.access = c.broker = mql_call_channel_new(grpc_channel_create(c.endpoint, cr, NULL));
    grpc_channel_credentials_release(cr);
    old = c.access;
    call = mql_base_call(&c, c.broker, MQL_M_HEARTBEAT, 5000, &test_call_ops, 0, NULL);
    CHECK(mql_base_unary(&c, call, &req.base) == 0);   /* in flight to a proxy that is slow */

    /* the stream was lost (the proxy reset it): the session moves */
    mql_backoff_init(&c.reconnect, 200, 10000);
    c.state = MQL_CLIENT_READY;
    c.reconnecting = 1;
    snprintf(c.reconnect_code, sizeof(c.reconnect_code), "%s", "UNAVAILABLE");
    c.telemetry_retry_at = now - 1;
    mql_session_timers(&c, now, now + 60000);
    CHECK(c.endpoint_at == 1 && c.access != old);
    CHECK(old->refs == 1);                         /* the call's own */
    /* the call on the old channel goes on: nothing completes before its deadline */
    ev = grpc_completion_queue_next(c.cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                       gpr_time_from_millis(500, GPR_TIMESPAN)),
                                    NULL);
    CHECK(ev.type == GRPC_QUEUE_TIMEOUT);
    client_finish(&c);                             /* the last call freed: the old channel with it */
    free(c.endpoint);
    free(c.host);
    close(fd1);
    close(fd2);
}

/* A proxy restarted while the session waited out its backoff (up to 10 s):
 * receives came back answered (INTERNAL_SERVER_ERROR, its settings for us
 * gone) for seconds before the next attempt, and the releases held for the
 * reconnect waited with them. An answered call brings the attempt forward;
 * one already under way, or none due, is left as it is. */
static void a_proxy_that_answers_again_ends_the_backoff(void) {
    mql_client c;
    int64_t now;
    client_init(&c, MQL_CONSUMER);
    mql_backoff_init(&c.reconnect, 200, 10000);
    c.state = MQL_CLIENT_READY;
    now = mql_now_ms();
    c.telemetry_retry_at = now + 8000;
    mql_session_proxy_answered(&c);       /* not reconnecting: nothing to do */
    CHECK(c.telemetry_retry_at == now + 8000);
    c.reconnecting = 1;
    mql_session_proxy_answered(&c);
    CHECK(c.telemetry_retry_at <= mql_now_ms());
    now = mql_now_ms();
    mql_session_timers(&c, now, now + 60000);
    CHECK(c.telemetry != NULL);           /* the attempt went out */
    c.telemetry_retry_at = 0;
    mql_session_proxy_answered(&c);       /* it waits for its own answer */
    CHECK(c.telemetry_retry_at == 0);
    client_finish(&c);
}


/* msg packed into a byte buffer, as a frame arrives (the caller destroys it). */
static grpc_byte_buffer *packed(const ProtobufCMessage *msg) {
    uint8_t buf[256];
    size_t len = protobuf_c_message_pack(msg, buf);
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* The proxy sends on the session's stream: our settings stored (settings 1)
 * or a ReconnectEndpointsCommand (settings 0). */
static void telemetry_frame(mql_client *c, int settings) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__Settings s = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    Apache__Rocketmq__V2__ReconnectEndpointsCommand rc =
        APACHE__ROCKETMQ__V2__RECONNECT_ENDPOINTS_COMMAND__INIT;
    grpc_byte_buffer *bb;
    if (settings) {
        cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
        cmd.settings = &s;
    } else {
        rc.nonce = "n";
        cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_RECONNECT_ENDPOINTS_COMMAND;
        cmd.reconnect_endpoints_command = &rc;
    }
    bb = packed(&cmd.base);
    c->telemetry->ops->on_message(c, c->telemetry, bb);
    grpc_byte_buffer_destroy(bb);
}

/* The session's stream ends with status, as the client thread ends it (the
 * call stays in c->calls: client_finish cancels and frees it). */
static void telemetry_ends(mql_client *c, grpc_status_code status) {
    mql_call *stream = c->telemetry;
    stream->status = status;
    stream->ops->on_done(c, stream);
}

/* A proxy that takes our settings and drops the stream at once, again and
 * again (a proxy restarting in a loop, a middlebox that ends streams): each
 * settings answered reset the backoff, so the session came back every
 * 100-200 ms for as long as it lasted, a new stream five to ten times a
 * second (with several endpoints a new channel and a QueryRoute each time).
 * Only a stream that held is a working connection: until then the waits grow. */
static void a_stream_dropped_right_after_its_settings_still_backs_off(void) {
    mql_client c;
    int64_t now, wait = 0;
    int n;
    client_init(&c, MQL_PRODUCER);
    mql_backoff_init(&c.reconnect, 200, 10000);
    c.state = MQL_CLIENT_READY;
    c.reconnecting = 1;
    for (n = 0; n < 8; n++) {
        now = mql_now_ms();
        c.telemetry_retry_at = now - 1;               /* the wait is over */
        mql_session_timers(&c, now, now + 60000);
        CHECK(c.telemetry != NULL);
        if (!c.telemetry) break;
        telemetry_frame(&c, 1);                       /* our settings, stored */
        CHECK(!c.reconnecting);
        telemetry_ends(&c, GRPC_STATUS_UNAVAILABLE);  /* and the stream dropped */
        CHECK(c.reconnecting && c.telemetry_retry_at != 0);
        wait = c.telemetry_retry_at - mql_now_ms();
    }
    /* the 8th wait in a row: its ceiling is the cap (10 s), the wait half of it at least */
    CHECK(wait >= 4000);
    /* a stream that held our settings for 10 s was a success: the next wait is short */
    now = mql_now_ms();
    c.telemetry_retry_at = now - 1;
    mql_session_timers(&c, now, now + 60000);
    CHECK(c.telemetry != NULL);
    if (c.telemetry) {
        telemetry_frame(&c, 1);
        c.settled_at -= 10000;                        /* ten seconds later */
        telemetry_ends(&c, GRPC_STATUS_UNAVAILABLE);
        CHECK(c.telemetry_retry_at - mql_now_ms() <= 200);
    }
    client_finish(&c);
}

/* A ReconnectEndpointsCommand is obeyed at once, without the backoff: new
 * channels, QueryRoute, a new stream. A server that asks again on every new
 * stream (a proxy being drained that the name still leads to) had the session
 * do all that as fast as the network answered, without end. Asked again soon
 * after the last one, the session waits the backoff first. */
static void a_server_that_keeps_asking_to_reconnect_is_backed_off(void) {
    mql_client c;
    int64_t now;
    int n, at_once = 0;
    client_init(&c, MQL_PRODUCER);
    mql_backoff_init(&c.reconnect, 200, 10000);
    c.state = MQL_CLIENT_READY;
    c.reconnecting = 1;
    now = mql_now_ms();
    c.telemetry_retry_at = now - 1;
    mql_session_timers(&c, now, now + 60000);
    CHECK(c.telemetry != NULL);
    if (!c.telemetry) return;
    telemetry_frame(&c, 1);
    CHECK(!c.reconnecting);

    /* asked once: at once, a new stream */
    telemetry_frame(&c, 0);
    telemetry_ends(&c, GRPC_STATUS_CANCELLED);
    CHECK(c.telemetry != NULL && c.telemetry_retry_at == 0);
    CHECK(c.metrics.reconnects == 2);
    /* asked again as soon as the new stream has our settings, and again */
    for (n = 0; n < 4 && c.telemetry; n++) {
        telemetry_frame(&c, 1);
        telemetry_frame(&c, 0);
        telemetry_ends(&c, GRPC_STATUS_CANCELLED);
        if (c.telemetry) {            /* at once again: no wait at all */
            at_once++;
            continue;
        }
        now = mql_now_ms();
        CHECK(c.reconnecting && c.telemetry_retry_at > now);   /* after the backoff */
        c.telemetry_retry_at = now - 1;
        mql_session_timers(&c, now, now + 60000);
        CHECK(c.telemetry != NULL);
    }
    CHECK(n == 4 && at_once == 0);
    CHECK(c.metrics.reconnects == 6);             /* one per request, counted once each */
    CHECK(c.reconnect.attempt == 4);              /* and the waits grew */
    /* asked 10 s after the last time: at once again */
    if (c.telemetry) {
        telemetry_frame(&c, 1);
        telemetry_frame(&c, 0);
        c.asked_at -= 10000;
        telemetry_ends(&c, GRPC_STATUS_CANCELLED);
        CHECK(c.telemetry != NULL && c.telemetry_retry_at == 0);
        CHECK(c.metrics.reconnects == 7);
    }
    client_finish(&c);
}

int main(void) {
    RUN(channels_have_no_retry_layer_and_keep_their_limits);
    RUN(a_route_reply_after_close_opens_no_telemetry_stream);
    RUN(a_route_of_two_brokers_keeps_both_readable_masters);
    RUN(the_route_is_refreshed_and_brings_a_broker_that_joined);
    RUN(a_reconnect_whose_settings_never_come_back_is_given_up);
    RUN(a_given_up_stream_is_counted_once);
    RUN(only_a_connection_failure_moves_to_the_next_endpoint);
    RUN(a_timed_out_route_is_asked_again_of_the_same_proxy);
    RUN(a_replaced_channel_keeps_the_calls_in_flight_on_it);
    RUN(a_proxy_that_answers_again_ends_the_backoff);
    RUN(a_stream_dropped_right_after_its_settings_still_backs_off);
    RUN(a_server_that_keeps_asking_to_reconnect_is_backed_off);
    return TEST_REPORT("session_test");
}
