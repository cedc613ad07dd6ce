/* mql_session.c -- what a client does before and around any message.
 *
 * A session is QueryRoute (which broker serves the topic), then a Telemetry
 * stream whose first command sends our Settings: the proxy refuses receives
 * from a client id it has no settings for. The client is ready when the
 * settings come back. A Heartbeat every 10 s keeps the proxy from dropping
 * the client (ClientActivity's expiry), and NotifyClientTermination says
 * goodbye so the proxy drops the client's registration at once. (It does not
 * give messages back: with auto_renew off the proxy tracks no handles of
 * ours; close nacks them.)
 *
 * The session decides when to move to another endpoint of the list (tried in
 * order while the start fails for want of a connection, and on a lost proxy);
 * how an endpoint is reached, its channels plaintext or TLS, is mql_endpoint.c.
 *
 * Reconnecting. A started session whose Telemetry stream ends has lost its
 * proxy (a killed proxy's sockets are reset at once, so this is prompt). After
 * a backoff with jitter (mql_backoff.h) it re-opens Telemetry, or with several
 * endpoints moves to the next one (wrapping around): a new channel, QueryRoute
 * again, then Telemetry and a heartbeat at once. In cluster mode every proxy
 * reaches the same brokers through namesrv, and a receipt handle names its
 * broker, so renewals and acks of messages received through the dead proxy
 * simply go out on the new channel once it has our settings (releases and
 * renewals are held until then: mql_release.c, mql_renew.c); what the
 * broker refuses is lost as any renewal failure is. The session stays READY meanwhile (a host's calls fail
 * UNAVAILABLE, never NOT_READY), and says `reconnecting` in its metrics until
 * the new proxy has our settings. Calls in flight on the old channel keep it
 * alive (each holds a reference, mql_channel in mql_call.h) and end on their
 * own: destroying a grpc channel fails every call still on it.
 *
 * Every function here runs with c->mu held unless it says otherwise.
 */
#include "mql_session.h"
#include "mql_endpoint.h"
#include "mql_release.h"
#include "mql_renew.h"
#include "mql_lite.h"

#include <grpc/grpc_security.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mql_inbound.h"

#define HEARTBEAT_EVERY_MS 10000
/* A consumer asks for its topic's route again this often, as the Java client
 * does (ClientImpl's route cache, updated every 30 s): a broker that joined the
 * topic, or was down when the consumer started, is received from once the
 * route lists it. The op of that QueryRoute is ROUTE_REFRESH_OP. */
#define ROUTE_REFRESH_EVERY_MS 30000
#define ROUTE_REFRESH_OP UINT64_MAX
/* A stream that kept our settings this long (a heartbeat period) was a
 * working connection: only then does the reconnect backoff start over, and
 * only a server's request to reconnect this long after the last one is obeyed
 * at once. A proxy that takes our settings and drops the stream, or asks us to
 * reconnect, on every new stream would otherwise have the session back every
 * 100-200 ms, or as fast as the network answers. */
#define STREAM_HELD_MS 10000
/* an orphan's body after inflation: the proxy's own inbound limit */
#define MQL_ORPHAN_MAX_BODY (130u * 1024 * 1024)

/* What each of the session's calls does when it ends (mql_call_ops). */
static void on_route_done(mql_client *c, mql_call *call);
static void on_telemetry_message(mql_client *c, mql_call *call, grpc_byte_buffer *reply);
static void on_telemetry_done(mql_client *c, mql_call *call);
static void on_heartbeat_done(mql_client *c, mql_call *call);
static void on_terminate_done(mql_client *c, mql_call *call);

static const mql_call_ops route_ops = {.on_done = on_route_done};
static const mql_call_ops telemetry_ops = {.on_message = on_telemetry_message,
                                           .on_done = on_telemetry_done};
static const mql_call_ops heartbeat_ops = {.on_done = on_heartbeat_done};
static const mql_call_ops terminate_ops = {.on_done = on_terminate_done};

/* A started session lost its proxy (code: how): try again after the next backoff. */
static void reconnect_later(mql_client *c, const char *code) {
    if (c->stopping || c->state != MQL_CLIENT_READY) return;
    c->reconnecting = 1;
    snprintf(c->reconnect_code, sizeof(c->reconnect_code), "%s", code);
    c->telemetry_retry_at = mql_now_ms() + mql_backoff_next(&c->reconnect, mql_base_random(c));
}

/* A start that failed for want of a connection (nothing answered, or the call
 * ran out of time) goes on with the next endpoint, as the official clients go
 * through theirs; a proxy that answered with an error would answer the same
 * anywhere. 1 if the session started again there. */
static int start_next_endpoint(mql_client *c, const mql_result *r) {
    char err[MQL_ERRLEN];
    if (c->stopping || c->endpoint_at + 1 >= c->nendpoints) return 0;
    if (strcmp(r->code, "UNAVAILABLE") != 0 && strcmp(r->code, "TIMEOUT") != 0) return 0;
    if (mql_endpoint_use(c, c->endpoint_at + 1, err, sizeof(err)) < 0) return 0;
    mql_endpoint_channels_renew(c);
    c->metrics.reconnects++;
    mql_metrics_error(&c->metrics, "start", r->code);
    mql_session_begin(c);
    return 1;
}

static void fail_start(mql_client *c, const mql_result *r) {
    mql_result named = *r;
    if (c->state != MQL_CLIENT_STARTING) return;
    if (start_next_endpoint(c, r)) return;
    c->state = MQL_CLIENT_FAILED;
    /* grpc reports a refused certificate as UNAVAILABLE, like a dead proxy:
     * give it a code of its own so nobody waits for the proxy to come back */
    if (c->tls && strcmp(r->code, "UNAVAILABLE") == 0 &&
        (strstr(r->msg, "andshake") || strstr(r->msg, "erification")))
        snprintf(named.code, sizeof(named.code), "%s", "TLS_HANDSHAKE");
    mql_base_post_op(c, c->start_op, &named);
}

static void telemetry_open(mql_client *c);
static int route_start(mql_client *c, const char *topic_name, uint64_t op, int64_t timeout_ms);

/* ReconnectEndpointsCommand (rocketmq-apis 2.1.x: "reconnect server use the
 * latest endpoints"; the command carries only a nonce). asked: the command came
 * on the stream; we end the stream, and when it has ended (done) we reconnect
 * at once, without the backoff of a lost proxy: new channels to the endpoint in
 * use (its name resolved afresh), QueryRoute and our settings again; asked again
 * within STREAM_HELD_MS of the last time, after the backoff. Leases are
 * not touched: renewals and releases wait for the new settings, as in every
 * reconnect. 1 from done when it started the reconnection. */
static int reconnect_endpoints(mql_client *c, int done) {
    int64_t now;
    if (!done) {
        if (c->stopping || c->state != MQL_CLIENT_READY || !c->telemetry || c->reconnect_asked) return 0;
        c->reconnect_asked = 1;
        c->telemetry_given_up = 1;   /* its end is ours, not a failure */
        mql_call_cancel(c->telemetry);
        return 0;
    }
    if (!c->reconnect_asked) return 0;
    c->reconnect_asked = 0;
    if (c->stopping || c->state != MQL_CLIENT_READY) return 0;
    c->reconnecting = 1;
    mql_endpoint_channels_renew(c);
    now = mql_now_ms();
    if (c->asked_at && now - c->asked_at < STREAM_HELD_MS) {
        /* asked again soon after the last time (a proxy being drained that the
         * name still leads to asks on every new stream): after the backoff */
        c->asked_at = now;
        c->reconnect_route = 1;
        reconnect_later(c, "RECONNECT_ASKED");   /* a code that keeps the endpoint */
        return 1;
    }
    c->asked_at = now;
    c->metrics.reconnects++;
    if (c->type != MQL_CONSUMER || route_start(c, c->consumer.topic, 0, c->request_timeout_ms) < 0)
        telemetry_open(c);
    return 1;
}

/* QueryRoute for topic: the session's own (op 0) picks the broker; a host's
 * op only learns whether the topic exists. */
static int route_start(mql_client *c, const char *topic_name, uint64_t op, int64_t timeout_ms) {
    Apache__Rocketmq__V2__QueryRouteRequest req = APACHE__ROCKETMQ__V2__QUERY_ROUTE_REQUEST__INIT;
    mql_pb_resource topic;
    mql_endpoint_buf ep;
    mql_set_resource(&topic, c->namespace_, topic_name);
    mql_endpoint_describe(&ep, c->host, c->port);
    req.topic = &topic;
    req.endpoints = &ep.ep;
    return mql_base_unary(c, mql_base_call(c, c->access, MQL_M_QUERY_ROUTE,
                                           timeout_ms, &route_ops, op, NULL),
                          &req.base);
}

static void session_route_start(mql_client *c) {
    mql_result r;
    if (route_start(c, c->consumer.topic, 0, c->request_timeout_ms) < 0) {
        mql_result_fail(&r, "INTERNAL", "QueryRoute: grpc refused to start the call");
        fail_start(c, &r);
    }
}

uint64_t mql_session_route(mql_client *c, const char *topic) {
    uint64_t op = ++c->next_op;
    if (route_start(c, topic, op, c->request_timeout_ms) < 0)
        op = mql_base_post_refusal(c, "INTERNAL", "QueryRoute: grpc refused to start the call");
    return op;
}

static int queue_readable(const Apache__Rocketmq__V2__MessageQueue *q) {
    return q->broker && q->broker->id == 0 &&
           (q->permission == APACHE__ROCKETMQ__V2__PERMISSION__READ ||
            q->permission == APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE);
}

/* The route's readable brokers, each name once, in route order: what the
 * receives take turns naming (mql_base.h). Replaces the list of an earlier
 * route; the turn carries on where it was. */
static void take_brokers(mql_consumer_part *cs, const Apache__Rocketmq__V2__QueryRouteResponse *resp) {
    size_t i, j, n = 0;
    char **names = mql_xcalloc(resp->n_message_queues, sizeof(char *));
    for (i = 0; i < resp->n_message_queues; i++) {
        const Apache__Rocketmq__V2__MessageQueue *q = resp->message_queues[i];
        if (!queue_readable(q) || !q->broker->name) continue;
        for (j = 0; j < n && strcmp(names[j], q->broker->name) != 0; j++) {}
        if (j == n) names[n++] = mql_strdup(q->broker->name);
    }
    if (n == 0) {   /* none readable: keep what we had (the session's own route fails then) */
        free(names);
        return;
    }
    for (i = 0; i < cs->nbrokers; i++) free(cs->brokers[i]);
    free(cs->brokers);
    cs->brokers = names;
    cs->nbrokers = n;
}

static void on_route_done(mql_client *c, mql_call *call) {
    mql_consumer_part *cs = &c->consumer;
    mql_result r;
    Apache__Rocketmq__V2__QueryRouteResponse *resp =
        mql_call_reply(call, &apache__rocketmq__v2__query_route_response__descriptor, &r);
    size_t i;
    if (call->op == ROUTE_REFRESH_OP) {
        /* the periodic refresh: only the brokers change; a failure leaves them as they were */
        if (r.ok) take_brokers(cs, resp);
        else mql_metrics_error(&c->metrics, "route", r.code);
        mql_call_reply_free(resp);
        return;
    }
    if (call->op) {
        /* a host's question: does the topic exist? */
        mql_call_reply_free(resp);
        if (!r.ok) mql_metrics_error(&c->metrics, "route", r.code);
        mql_base_post_op(c, call->op, &r);
        return;
    }
    if (r.ok) {
        const Apache__Rocketmq__V2__MessageQueue *q = NULL;
        for (i = 0; i < resp->n_message_queues && !q; i++)
            if (queue_readable(resp->message_queues[i])) q = resp->message_queues[i];
        if (!q) {
            mql_result_fail(&r, "FORBIDDEN", "QueryRoute: topic %s has no readable queue",
                            cs->topic);
        } else {
            take_brokers(cs, resp);
            mql_endpoint_take_route(c, q->broker->endpoints);
        }
    }
    mql_call_reply_free(resp);
    if (r.ok) c->reconnect_route = 0;
    if (!r.ok) {
        if (c->state == MQL_CLIENT_READY) {
            mql_metrics_error(&c->metrics, "reconnect", r.code);
            c->reconnect_route = 1;
            reconnect_later(c, r.code);
        }
        fail_start(c, &r);
        return;
    }
    telemetry_open(c);
}

static void telemetry_send_settings(mql_client *c) {
    mql_consumer_part *cs = &c->consumer;
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__Settings s = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    Apache__Rocketmq__V2__UA ua = APACHE__ROCKETMQ__V2__UA__INIT;
    Apache__Rocketmq__V2__Subscription sub = APACHE__ROCKETMQ__V2__SUBSCRIPTION__INIT;
    Apache__Rocketmq__V2__SubscriptionEntry entry = APACHE__ROCKETMQ__V2__SUBSCRIPTION_ENTRY__INIT;
    Apache__Rocketmq__V2__SubscriptionEntry *entries[1] = {&entry};
    Apache__Rocketmq__V2__FilterExpression fe = APACHE__ROCKETMQ__V2__FILTER_EXPRESSION__INIT;
    Apache__Rocketmq__V2__Publishing pub = APACHE__ROCKETMQ__V2__PUBLISHING__INIT;
    Apache__Rocketmq__V2__RetryPolicy retry = APACHE__ROCKETMQ__V2__RETRY_POLICY__INIT;
    Apache__Rocketmq__V2__ExponentialBackoff backoff = APACHE__ROCKETMQ__V2__EXPONENTIAL_BACKOFF__INIT;
    mql_pb_resource group, topic, *pub_topics[64], pub_topic_store[64];
    Google__Protobuf__Duration timeout, poll, b_init, b_max;
    mql_endpoint_buf ep;
    size_t i;

    mql_endpoint_describe(&ep, c->host, c->port);
    mql_set_duration(&timeout, c->request_timeout_ms);
    s.access_point = &ep.ep;
    s.request_timeout = &timeout;
    ua.language = APACHE__ROCKETMQ__V2__LANGUAGE__CPP;
    ua.version = (char *)MQL_VERSION;
    ua.platform = (char *)"Linux (mqlease)";
    ua.hostname = c->hostname;
    s.user_agent = &ua;
    if (c->type == MQL_CONSUMER) {
        s.client_type = mql_lite_client_type(c);
        mql_set_resource(&group, c->namespace_, cs->group);
        mql_set_resource(&topic, c->namespace_, cs->topic);
        fe.type = cs->filter_sql ? APACHE__ROCKETMQ__V2__FILTER_TYPE__SQL
                                         : APACHE__ROCKETMQ__V2__FILTER_TYPE__TAG;
        fe.expression = cs->filter;
        entry.topic = &topic;
        entry.expression = &fe;
        sub.group = &group;
        sub.n_subscriptions = 1;
        sub.subscriptions = entries;
        mql_set_duration(&poll, 20000);
        sub.long_polling_timeout = &poll;
        s.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION;
        s.subscription = &sub;
    } else {
        s.client_type = APACHE__ROCKETMQ__V2__CLIENT_TYPE__PRODUCER;
        for (i = 0; i < c->producer.ntopics && i < 64; i++) {
            mql_set_resource(&pub_topic_store[i], c->namespace_, c->producer.topics[i]);
            pub_topics[i] = &pub_topic_store[i];
        }
        pub.n_topics = i;
        pub.topics = pub_topics;
        s.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_PUBLISHING;
        s.publishing = &pub;
        /* the official producers send their retry policy; the proxy answers with its own */
        mql_set_duration(&b_init, 10);
        mql_set_duration(&b_max, 1000);
        backoff.initial = &b_init;
        backoff.max = &b_max;
        backoff.multiplier = 2;
        retry.max_attempts = 3;
        retry.strategy_case = APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_EXPONENTIAL_BACKOFF;
        retry.exponential_backoff = &backoff;
        s.backoff_policy = &retry;
    }
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    cmd.settings = &s;
    mql_call_send(c->telemetry, &cmd.base);
}

static void telemetry_open(mql_client *c) {
    mql_result r;
    c->telemetry_retry_at = 0;
    /* a stream has no deadline: one opened after close would keep the thread alive */
    if (c->stopping) return;
    c->telemetry = mql_base_call(c, c->broker, MQL_M_TELEMETRY, -1, &telemetry_ops, 0, NULL);
    if (mql_call_start_bidi(c->telemetry) < 0) {
        mql_base_unlink(c, c->telemetry);
        mql_call_free(c->telemetry);
        c->telemetry = NULL;
        mql_result_fail(&r, "INTERNAL", "Telemetry: grpc refused to start the stream");
        fail_start(c, &r);
        reconnect_later(c, r.code);
        return;
    }
    telemetry_send_settings(c);
    /* a stream has no deadline, so the answer to a reconnect's settings gets
     * one: a proxy that holds the stream and never answers is given up like a
     * dead one (the start has start_timeout for the same) */
    if (c->reconnecting)
        c->settings_due_at =
            mql_now_ms() + (c->reconnect_call_ms ? c->reconnect_call_ms : c->request_timeout_ms);
}

/* The proxy asks about a half message left open (the broker's check found it
 * older than transactionTimeOut): the host's checker answers it with
 * EndTransaction (mql_transaction.c). The event takes the message and the
 * transaction id from t. A consumer never gets one: the proxy sends checks
 * only to producers of the topic (ClientActivity.registerProducer). */
static void telemetry_orphan(mql_client *c, mql_telemetry_reply *t) {
    mql_event *ev;
    if (!t->has_orphan || c->type != MQL_PRODUCER) {
        mql_metrics_error(&c->metrics, "orphan", t->orphan_bad ? t->orphan_bad : "not_a_producer");
        mql_telemetry_clear(t);
        return;
    }
    ev = mql_event_new(MQL_EV_ORPHAN, 0);
    mql_result_ok(&ev->result);
    ev->msgs = mql_xcalloc(1, sizeof(*ev->msgs));
    ev->msgs[0] = t->orphan;   /* moved: t no longer owns it */
    ev->nmsgs = 1;
    ev->transaction_id = t->orphan_transaction_id;
    memset(&t->orphan, 0, sizeof(t->orphan));
    t->orphan_transaction_id = NULL;
    t->has_orphan = 0;
    c->metrics.orphan_checks++;
    mql_events_push(&c->events, ev);
}

/* The frame is read by mql_telemetry_decode (mql_inbound.h), which the fuzzer drives too. */
static void on_telemetry_message(mql_client *c, mql_call *call, grpc_byte_buffer *reply) {
    mql_telemetry_reply t;
    grpc_slice slice;
    mql_result r;
    (void)call;
    if (mql_read_all(reply, &slice) < 0) return;
    mql_telemetry_decode(&t, GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice),
                         MQL_ORPHAN_MAX_BODY);
    grpc_slice_unref(slice);
    if (!t.decoded) return;
    if (t.has_orphan || t.orphan_bad) {
        telemetry_orphan(c, &t);
        return;
    }
    if (t.has_settings && !(t.has_status && !t.status.ok) && c->type == MQL_CONSUMER) {
        /* what the group is: ordered or not, and how often and when a failed
         * message may be tried again; the host reads both from the metrics */
        c->consumer.fifo = t.fifo;
        if (t.retry.max_attempts > 0) c->consumer.retry = t.retry;
    }
    if (t.has_status && !t.status.ok) {
        fail_start(c, &t.status);
    } else if (t.has_settings && c->state == MQL_CLIENT_STARTING) {
        /* the proxy stored our settings: receives and heartbeats work from now on */
        c->state = MQL_CLIENT_READY;
        c->heartbeat_at = mql_now_ms();
        if (c->type == MQL_CONSUMER) c->route_refresh_at = c->heartbeat_at + ROUTE_REFRESH_EVERY_MS;
        c->settled_at = c->heartbeat_at;
        mql_result_ok(&r);
        mql_base_post_op(c, c->start_op, &r);
        mql_backoff_reset(&c->reconnect);
    } else if (t.has_settings && c->reconnecting) {
        /* the proxy we reconnected to has our settings: heartbeat at once so
         * it knows our group before the next receive */
        c->reconnecting = 0;
        c->settings_due_at = 0;
        c->heartbeat_at = mql_now_ms();
        /* the backoff starts over once this stream has held (on_telemetry_done) */
        c->settled_at = c->heartbeat_at;
        c->reconnect_call_ms = 0;
        c->reconnect_code[0] = '\0';
        /* and it has a Telemetry channel for our client id, which acks and
         * changes need on 5.2.0 (ReceiptHandleGroupKey): the releases held
         * meanwhile go out now (mql_release.c), and the renewals held
         * for the same reason (mql_renew.c) */
        mql_release_run_deferred(c);
        if (c->type == MQL_CONSUMER) mql_renew_resume(c);
        /* and our lite subscription, which the broker tied to the old proxy */
        if (c->type == MQL_CONSUMER) mql_lite_resync(c);
    }
    if (t.reconnect_endpoints) reconnect_endpoints(c, 0);
}

static void on_telemetry_done(mql_client *c, mql_call *call) {
    mql_result r;
    int given_up = c->telemetry_given_up;
    /* one that held our settings was a working connection: the next wait is
     * short again; one dropped sooner is one more failure in a row */
    if (c->settled_at && mql_now_ms() - c->settled_at >= STREAM_HELD_MS)
        mql_backoff_reset(&c->reconnect);
    c->settled_at = 0;
    c->telemetry = NULL;
    c->settings_due_at = 0;
    c->telemetry_given_up = 0;
    mql_call_result(call, NULL, &r);
    if (r.ok) mql_result_fail(&r, "UNAVAILABLE", "Telemetry: the server closed the stream");
    fail_start(c, &r);
    if (!c->stopping && !given_up && c->state == MQL_CLIENT_READY)
        mql_metrics_error(&c->metrics, "telemetry", r.code);
    /* one we gave up on had answered nothing in time: a TIMEOUT, not our CANCELLED */
    if (!reconnect_endpoints(c, 1)) reconnect_later(c, given_up ? "TIMEOUT" : r.code);
}

static void heartbeat_start(mql_client *c) {
    Apache__Rocketmq__V2__HeartbeatRequest req = APACHE__ROCKETMQ__V2__HEARTBEAT_REQUEST__INIT;
    mql_pb_resource group;
    if (c->type == MQL_CONSUMER) {
        mql_set_resource(&group, c->namespace_, c->consumer.group);
        req.group = &group;
        req.client_type = mql_lite_client_type(c);
    } else {
        req.client_type = APACHE__ROCKETMQ__V2__CLIENT_TYPE__PRODUCER;
    }
    mql_base_unary(c, mql_base_call(c, c->broker, MQL_M_HEARTBEAT, c->request_timeout_ms,
                                    &heartbeat_ops, 0, NULL),
                   &req.base);
}

static void on_heartbeat_done(mql_client *c, mql_call *call) {
    mql_result r;
    void *resp = mql_call_reply(call, &apache__rocketmq__v2__heartbeat_response__descriptor, &r);
    if (!r.ok && !c->stopping) mql_metrics_error(&c->metrics, "heartbeat", r.code);
    mql_call_reply_free(resp);
}

/* -------------------------------------------------------------- terminate */

uint64_t mql_session_terminate(mql_client *c) {
    Apache__Rocketmq__V2__NotifyClientTerminationRequest req =
        APACHE__ROCKETMQ__V2__NOTIFY_CLIENT_TERMINATION_REQUEST__INIT;
    mql_pb_resource group;
    mql_call *call;
    uint64_t op = ++c->next_op;
    if (c->type == MQL_CONSUMER) {
        mql_set_resource(&group, c->namespace_, c->consumer.group);
        req.group = &group;
    }
    call = mql_base_call(c, c->broker, MQL_M_TERMINATE, c->request_timeout_ms, &terminate_ops,
                         op, NULL);
    if (mql_base_unary(c, call, &req.base) < 0) {
        op = mql_base_post_refusal(c, "INTERNAL", "terminate: grpc refused to start the call");
    } else {
        c->heartbeat_at = 0;   /* a heartbeat now would register us again */
        c->route_refresh_at = 0;
    }
    return op;
}

static void on_terminate_done(mql_client *c, mql_call *call) {
    mql_result r;
    mql_call_reply_free(mql_call_reply(
        call, &apache__rocketmq__v2__notify_client_termination_response__descriptor, &r));
    mql_base_post_op(c, call->op, &r);
}

/* ------------------------------------------------------------ the timers */

void mql_session_begin(mql_client *c) {
    if (c->type == MQL_CONSUMER) session_route_start(c);
    else telemetry_open(c);
}

void mql_session_retry_plan(size_t n, const char *code, int64_t request_ms, size_t *at,
                            int64_t *call_ms) {
    int64_t first = *call_ms ? *call_ms : request_ms;
    int next = 0;
    if (strcmp(code, "UNAVAILABLE") == 0) {
        next = 1;
    } else if (strcmp(code, "TIMEOUT") == 0) {
        if (first >= MQL_BACKOFF_CAP_MS) next = 1;
        else *call_ms = first * 2 < MQL_BACKOFF_CAP_MS ? first * 2 : MQL_BACKOFF_CAP_MS;
    }
    if (next) {
        *call_ms = 0;
        if (n > 1) *at = (*at + 1) % n;
    }
}

/* A reconnection attempt, where mql_session_retry_plan says: a consumer that
 * moved (or whose route query failed) asks for the route afresh, then
 * Telemetry; a producer, or a consumer whose stream alone failed, re-opens
 * Telemetry. */
static void reconnect_now(mql_client *c) {
    char err[MQL_ERRLEN];
    size_t at = c->endpoint_at;
    c->telemetry_retry_at = 0;
    c->metrics.reconnects++;
    mql_session_retry_plan(c->nendpoints, c->reconnect_code, c->request_timeout_ms, &at,
                           &c->reconnect_call_ms);
    if (at != c->endpoint_at && mql_endpoint_use(c, at, err, sizeof(err)) == 0) {
        mql_endpoint_channels_renew(c);
        c->reconnect_route = 1;
    }
    /* the stream was to the address the route named, not to our endpoint:
     * only the route can say where the session goes now (that address may
     * be gone for good, a broker restarted elsewhere) */
    if (c->broker != c->access) c->reconnect_route = 1;
    if (c->type == MQL_CONSUMER && c->reconnect_route &&
        route_start(c, c->consumer.topic, 0,
                    c->reconnect_call_ms ? c->reconnect_call_ms : c->request_timeout_ms) == 0)
        return;
    telemetry_open(c);
}

/* A reconnect's settings were not answered in time: cancel the stream; its
 * end (CANCELLED) schedules the next attempt after the backoff. */
static void settings_overdue(mql_client *c) {
    c->settings_due_at = 0;
    mql_metrics_error(&c->metrics, "telemetry", "TIMEOUT");
    if (c->telemetry) {
        c->telemetry_given_up = 1;
        mql_call_cancel(c->telemetry);
    } else {
        reconnect_later(c, "TIMEOUT");
    }
}

/* The backoff between attempts grows to MQL_BACKOFF_CAP_MS, so a proxy that
 * restarted could sit answering for seconds before the next attempt. It
 * answers meanwhile, but not as we need: 5.x keeps a client's settings only
 * for a live Telemetry stream, so every ReceiveMessage fails
 * INTERNAL_SERVER_ERROR (a NullPointerException in ReceiveMessageActivity:
 * the settings are null) and the releases held for the reconnect wait. A
 * gRPC OK is the proxy's own answer, which an attempt in flight or a stream
 * awaiting its settings already waits for. */
void mql_session_proxy_answered(mql_client *c) {
    int64_t now = mql_now_ms();
    if (c->reconnecting && !c->telemetry && !c->stopping && c->telemetry_retry_at > now)
        c->telemetry_retry_at = now;
}

int64_t mql_session_timers(mql_client *c, int64_t now, int64_t wake) {
    if (c->settings_due_at && now >= c->settings_due_at) settings_overdue(c);
    if (c->telemetry_retry_at && now >= c->telemetry_retry_at) reconnect_now(c);
    if (c->heartbeat_at && now >= c->heartbeat_at && c->state == MQL_CLIENT_READY) {
        heartbeat_start(c);
        c->heartbeat_at = now + HEARTBEAT_EVERY_MS;
    }
    if (c->telemetry_retry_at && c->telemetry_retry_at < wake) wake = c->telemetry_retry_at;
    if (c->settings_due_at && c->settings_due_at < wake) wake = c->settings_due_at;
    if (c->route_refresh_at && now >= c->route_refresh_at && c->state == MQL_CLIENT_READY &&
        c->type == MQL_CONSUMER && !c->stopping) {
        route_start(c, c->consumer.topic, ROUTE_REFRESH_OP, c->request_timeout_ms);
        c->route_refresh_at = now + ROUTE_REFRESH_EVERY_MS;
    }
    if (c->heartbeat_at && c->heartbeat_at < wake) wake = c->heartbeat_at;
    if (c->route_refresh_at && c->route_refresh_at < wake) wake = c->route_refresh_at;
    return wake;
}
