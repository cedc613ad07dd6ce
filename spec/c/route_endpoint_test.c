/* route_endpoint_test.c -- which channel the session, the renewals and the
 * acks use once a route names a broker endpoint other than the one
 * configured, driven by hand without a server (client_fixture.h).
 *
 * A proxy in local mode (the broker inside the proxy, `mqbroker
 * --enable-proxy`) answers QueryRoute with each broker's own address and the
 * proxy's gRPC port (org.apache.rocketmq.proxy.service.route.
 * LocalTopicRouteService#getTopicRouteForProxy), not with the endpoint the
 * client dialled: a DNS name, a load balancer, another broker's proxy. The
 * session then talks to that address (c->broker) while its route queries go
 * to the configured one (c->access).
 */
#include <grpc/support/alloc.h>

#include "client_fixture.h"
#include "mql_test.h"

/* "OK, one readable queue of broker on host:port". */
static void route_to(mql_client *c, mql_call *call, const char *broker, const char *host,
                     int port) {
    Apache__Rocketmq__V2__QueryRouteResponse resp = APACHE__ROCKETMQ__V2__QUERY_ROUTE_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    Apache__Rocketmq__V2__MessageQueue q = APACHE__ROCKETMQ__V2__MESSAGE_QUEUE__INIT, *qs[1] = {&q};
    Apache__Rocketmq__V2__Broker b = APACHE__ROCKETMQ__V2__BROKER__INIT;
    Apache__Rocketmq__V2__Endpoints ep = APACHE__ROCKETMQ__V2__ENDPOINTS__INIT;
    Apache__Rocketmq__V2__Address a = APACHE__ROCKETMQ__V2__ADDRESS__INIT, *as[1] = {&a};
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    a.host = (char *)host;
    a.port = port;
    ep.n_addresses = 1;
    ep.addresses = as;
    b.name = (char *)broker;
    b.endpoints = &ep;
    q.broker = &b;
    q.permission = APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE;
    resp.status = &st;
    resp.n_message_queues = 1;
    resp.message_queues = qs;
    mql_base_unlink(c, call);
    call->status = GRPC_STATUS_OK;
    call->recv_buf = fixture_pack(&resp.base);
    call->ops->on_done(c, call);
    grpc_byte_buffer_destroy(call->recv_buf);
    call->recv_buf = NULL;
    fixture_done_calls[fixture_ndone++] = call;
}

/* The newest live call of method, or NULL. */
static mql_call *call_of(mql_client *c, const char *method) {
    mql_call *call;
    for (call = c->calls; call; call = call->next)
        if (strcmp(call->method, method) == 0) return call;
    return NULL;
}

/* The session's stream ends with status (the proxy went away). */
static void stream_ends(mql_client *c, grpc_status_code status) {
    mql_call *call = c->telemetry;
    mql_base_unlink(c, call);
    call->status = status;
    call->ops->on_done(c, call);
    fixture_done_calls[fixture_ndone++] = call;
}

/* The proxy answers the stream with the settings it stored for us. */
static void settings_back(mql_client *c) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__Settings s = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    grpc_byte_buffer *bb;
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    cmd.settings = &s;
    bb = fixture_pack(&cmd.base);
    c->telemetry->ops->on_message(c, c->telemetry, bb);
    grpc_byte_buffer_destroy(bb);
    c->heartbeat_at = 0;   /* no heartbeat in the way of the calls looked at */
}

/* The session's next attempt, as its timer runs it. */
static void attempt_now(mql_client *c) {
    int64_t now = mql_now_ms();
    c->telemetry_retry_at = now - 1;
    mql_session_timers(c, now, now + 60000);
}

/* A reconnecting consumer of one endpoint, 127.0.0.1:1, whose route is due. */
static void reconnecting_client(mql_client *c, const char *code) {
    fixture_client_init(c);
    c->host = "127.0.0.1";
    c->port = 1;
    c->nendpoints = 1;
    c->consumer.brokers = NULL;   /* the routes' lists are the client's to free */
    c->consumer.nbrokers = 0;
    mql_backoff_init(&c->reconnect, 200, 10000);
    c->reconnecting = 1;
    c->reconnect_route = 1;
    snprintf(c->reconnect_code, sizeof(c->reconnect_code), "%s", code);
}

static void client_done(mql_client *c) {
    size_t i;
    if (c->broker != c->access) mql_call_channel_unref(c->broker);
    c->broker = c->access;
    for (i = 0; i < c->consumer.nbrokers; i++) free(c->consumer.brokers[i]);
    free(c->consumer.brokers);
    c->consumer.brokers = NULL;
    c->consumer.nbrokers = 0;
    fixture_teardown(c);
}

/* The route named broker-a's own proxy, and that proxy went away (its
 * broker stopped, or came back on another address) while the configured
 * endpoint still answered. Each attempt re-opened the stream on the dead
 * address and never asked the route again: with one endpoint the session
 * never came back, and every lease was renewed against the dead proxy until
 * it was lost. The attempt asks the configured endpoint for the route, and
 * the session goes where the route now says. */
static void a_lost_route_endpoint_is_asked_for_again(void) {
    mql_client c;
    mql_call *call;
    mql_lease *l;
    int64_t now;
    reconnecting_client(&c, "UNAVAILABLE");
    attempt_now(&c);
    call = call_of(&c, MQL_M_QUERY_ROUTE);
    CHECK(call != NULL && call->channel == c.access);
    if (!call) return;
    route_to(&c, call, "broker-a", "127.0.0.2", 2);
    CHECK(c.broker != c.access);
    CHECK(c.telemetry != NULL && c.telemetry->channel == c.broker);
    if (!c.telemetry) return;
    settings_back(&c);
    CHECK(!c.reconnecting);

    stream_ends(&c, GRPC_STATUS_UNAVAILABLE);   /* 127.0.0.2:2 is gone */
    CHECK(c.reconnecting);
    attempt_now(&c);
    call = call_of(&c, MQL_M_QUERY_ROUTE);
    CHECK(call != NULL && call->channel == c.access);
    if (call) {
        route_to(&c, call, "broker-a", "127.0.0.1", 1);   /* back where we dial */
        CHECK(c.broker == c.access);
        CHECK(c.telemetry != NULL && c.telemetry->channel == c.access);
        if (c.telemetry) settings_back(&c);
        CHECK(!c.reconnecting);
    }
    /* and a held lease is renewed through the live proxy */
    now = mql_now_ms();
    l = mql_lease_add(&c.consumer.leases, "M1", "t", "h1", now - 1000, 30000);
    mql_lease_arm(&c.consumer.leases, l, now);
    mql_renew_timers(&c, now, now + 60000);
    call = call_of(&c, MQL_M_CHANGE);
    CHECK(call != NULL && call->channel == c.access);
    client_done(&c);
}

/* A route asked again (the last attempt's query failed) that names the
 * configured endpoint again must take the session back to it: the channel to
 * the address an earlier route named stayed in use for the stream, the
 * receives, the renewals and the acks. */
static void a_route_back_to_the_endpoint_drops_the_old_broker_channel(void) {
    mql_client c;
    mql_call *call;
    mql_channel *old;
    reconnecting_client(&c, "TIMEOUT");
    attempt_now(&c);
    call = call_of(&c, MQL_M_QUERY_ROUTE);
    if (!call) {
        CHECK(call != NULL);
        return;
    }
    route_to(&c, call, "broker-a", "127.0.0.2", 2);
    old = c.broker;
    CHECK(old != c.access);
    if (c.telemetry) settings_back(&c);
    if (c.telemetry) stream_ends(&c, GRPC_STATUS_DEADLINE_EXCEEDED);
    c.reconnect_route = 1;   /* as after a route query that failed */
    attempt_now(&c);
    call = call_of(&c, MQL_M_QUERY_ROUTE);
    CHECK(call != NULL && call->channel == c.access);
    if (call) route_to(&c, call, "broker-a", "127.0.0.1", 1);
    CHECK(c.broker == c.access);
    CHECK(c.telemetry != NULL && c.telemetry->channel == c.access);
    client_done(&c);
}

/* The channel's target holds want. */
static int target_has(const mql_channel *ch, const char *want) {
    char *t = grpc_channel_get_target(ch->grpc);
    int has = strstr(t, want) != NULL;
    gpr_free(t);
    return has;
}

/* A proxy reached over IPv6 names its host bare, as Guava's HostAndPort
 * gives it ("::1"): the channel went to "::1:1", which grpc reads as the one
 * IPv6 address ::1:1 on port 443, so a session that dialled "[::1]:1" moved
 * its stream, receives and acks to an address nothing listens on. */
static void an_ipv6_route_endpoint_is_dialled_in_brackets(void) {
    mql_client c;
    mql_call *call;
    reconnecting_client(&c, "UNAVAILABLE");
    c.endpoint = "[::1]:1";
    c.host = "[::1]";
    attempt_now(&c);
    call = call_of(&c, MQL_M_QUERY_ROUTE);
    if (call) route_to(&c, call, "broker-a", "::1", 1);   /* the endpoint we dialled */
    CHECK(c.broker == c.access);
    if (c.telemetry) stream_ends(&c, GRPC_STATUS_UNAVAILABLE);
    c.reconnect_route = 1;   /* as after a route query that failed */
    attempt_now(&c);
    call = call_of(&c, MQL_M_QUERY_ROUTE);
    CHECK(call != NULL);
    if (call) route_to(&c, call, "broker-a", "::2", 5);   /* another one */
    CHECK(c.broker != c.access && target_has(c.broker, "[::2]:5"));
    client_done(&c);
}

/* A route whose broker has an address with no host, or no port, which no
 * proxy sends: the session moved to a channel to ":0" and failed every call
 * on it, though the proxy that answered works. It stays on that proxy. */
static void a_route_endpoint_without_an_address_keeps_the_endpoint(void) {
    mql_client c;
    mql_call *call;
    reconnecting_client(&c, "UNAVAILABLE");
    attempt_now(&c);
    call = call_of(&c, MQL_M_QUERY_ROUTE);
    if (call) route_to(&c, call, "broker-a", "", 0);
    CHECK(c.broker == c.access);
    CHECK(c.telemetry != NULL && c.telemetry->channel == c.access);
    if (c.telemetry) stream_ends(&c, GRPC_STATUS_UNAVAILABLE);
    c.reconnect_route = 1;
    attempt_now(&c);
    call = call_of(&c, MQL_M_QUERY_ROUTE);
    CHECK(call != NULL);
    if (call) route_to(&c, call, "broker-a", "127.0.0.3", 70000);
    CHECK(c.broker == c.access);
    client_done(&c);
}

int main(void) {
    RUN(an_ipv6_route_endpoint_is_dialled_in_brackets);
    RUN(a_route_endpoint_without_an_address_keeps_the_endpoint);
    RUN(a_lost_route_endpoint_is_asked_for_again);
    RUN(a_route_back_to_the_endpoint_drops_the_old_broker_channel);
    return TEST_REPORT("route_endpoint_test");
}
