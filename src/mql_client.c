/* mql_client.c -- the session, the operations and the lease timers of one client.
 *
 * Where a message enters: on_receive_message() turns each streamed reply into
 * a lease in the table and arms its first renewal. Where its lease lives:
 * lease_timer() renews it (renew_start / on_renew_done) until the budget is
 * spent or the deadline passes. Where it leaves: release_start() acks or nacks
 * it with the newest receipt handle, after any renewal in flight has come back
 * (a release never races a renewal: see the deferred list).
 *
 * Every function here runs with c->mu held unless it says otherwise.
 */
#include "mql_client.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "mql_codec.h"

#define M_QUERY_ROUTE "/apache.rocketmq.v2.MessagingService/QueryRoute"
#define M_HEARTBEAT "/apache.rocketmq.v2.MessagingService/Heartbeat"
#define M_SEND "/apache.rocketmq.v2.MessagingService/SendMessage"
#define M_RECEIVE "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
#define M_ACK "/apache.rocketmq.v2.MessagingService/AckMessage"
#define M_TELEMETRY "/apache.rocketmq.v2.MessagingService/Telemetry"
#define M_TERMINATE "/apache.rocketmq.v2.MessagingService/NotifyClientTermination"
#define M_CHANGE "/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration"

#define HEARTBEAT_EVERY_MS 10000
#define TELEMETRY_RETRY_MS 1000
#define MAX_IDLE_WAIT_MS 200
#define RENEW_BACKOFF_MIN_MS 200
#define RENEW_BACKOFF_MAX_MS 5000
#define MIN_PROXY_POLL_MS 5000   /* grpcClientConsumerMinLongPollingTimeoutMillis */

typedef enum call_kind {
    K_ROUTE = 1, K_TELEMETRY, K_HEARTBEAT, K_RECEIVE, K_ACK, K_NACK, K_BUDGET_NACK, K_RENEW, K_SEND,
    K_TERMINATE
} call_kind;

typedef Apache__Rocketmq__V2__Resource pb_resource;
typedef Google__Protobuf__Duration pb_duration;

/* An ack or nack the host asked for: a list of leases and the op to answer. */
typedef struct release release;
struct release {
    uint64_t op;
    int is_ack;
    int64_t delay_ms;           /* nack */
    uint64_t *ids;
    size_t n;
    mql_result *entries;        /* one result per lease, filled as they settle */
    int *settled;
    struct release *next;       /* on c->deferred while renewals are in flight */
};

typedef struct receive_ctx {
    mql_message *msgs;
    size_t n, cap;
    mql_result status;
    int have_status;
} receive_ctx;

struct mql_client {
    mql_client_type type;
    char *endpoint, *host, *namespace_, *access_key, *secret_key, *security_token;
    int port;
    char *group, *topic, *filter;
    int filter_sql;
    char **topics;
    size_t ntopics;
    int64_t request_timeout_ms, invisible_ms, renew_every_ms, max_lease_ms, budget_nack_delay_ms;
    int renew, max_renewals;
    mql_budget_action on_budget;
    char client_id[192];
    char hostname[128];
    mql_identity id;
    uint8_t id_node[6];         /* message-id node bytes (random, in place of a MAC) */
    uint32_t id_seq;
    uint64_t rand_state;

    pthread_mutex_t mu;
    pthread_t thread;
    int thread_started;
    grpc_completion_queue *cq;
    grpc_channel *access;       /* the configured endpoint: routes */
    grpc_channel *broker;       /* the route's broker endpoint: everything else */
    char *broker_name;
    mql_events events;
    mql_lease_table leases;
    mql_metrics metrics;
    mql_client_state state;
    uint64_t start_op;
    uint64_t next_op;
    mql_call *calls;            /* every live call, so close can cancel them */
    mql_call *telemetry;
    int64_t telemetry_retry_at; /* 0: not scheduled */
    int64_t heartbeat_at;       /* 0: not scheduled */
    int stopping;
    release *deferred;
};

/* ---------------------------------------------------------------- helpers */

static uint64_t next_random(mql_client *c) {
    /* xorshift64*: jitter only, no need for quality */
    c->rand_state ^= c->rand_state >> 12;
    c->rand_state ^= c->rand_state << 25;
    c->rand_state ^= c->rand_state >> 27;
    return c->rand_state * 2685821657736338717ULL;
}

static void set_resource(pb_resource *r, const char *ns, const char *name) {
    apache__rocketmq__v2__resource__init(r);
    r->resource_namespace = (char *)(ns ? ns : "");
    r->name = (char *)(name ? name : "");
}

static void set_duration(pb_duration *d, int64_t ms) {
    google__protobuf__duration__init(d);
    d->seconds = ms / 1000;
    d->nanos = (int32_t)((ms % 1000) * 1000000);
}

static int is_ipv4(const char *h) {
    int dots = 0;
    for (; *h; h++) {
        if (*h == '.') dots++;
        else if (*h < '0' || *h > '9') return 0;
    }
    return dots == 3;
}

/* Endpoints as the proxy wants them: the scheme must never be UNSPECIFIED. */
typedef struct endpoints_buf {
    Apache__Rocketmq__V2__Endpoints ep;
    Apache__Rocketmq__V2__Address addr;
    Apache__Rocketmq__V2__Address *addrs[1];
} endpoints_buf;

static void set_endpoints(endpoints_buf *b, const char *host, int port) {
    apache__rocketmq__v2__endpoints__init(&b->ep);
    apache__rocketmq__v2__address__init(&b->addr);
    b->ep.scheme = is_ipv4(host) ? APACHE__ROCKETMQ__V2__ADDRESS_SCHEME__IPv4
                                 : APACHE__ROCKETMQ__V2__ADDRESS_SCHEME__DOMAIN_NAME;
    b->addr.host = (char *)host;
    b->addr.port = port;
    b->addrs[0] = &b->addr;
    b->ep.n_addresses = 1;
    b->ep.addresses = b->addrs;
}

static void post_op(mql_client *c, uint64_t op, const mql_result *r) {
    mql_event *ev = mql_event_new(MQL_EV_OP, op);
    ev->result = *r;
    mql_events_push(&c->events, ev);
}

static uint64_t post_now(mql_client *c, const char *code, const char *msg) {
    mql_result r;
    uint64_t op = ++c->next_op;
    mql_result_fail(&r, code, "%s", msg);
    post_op(c, op, &r);
    return op;
}

static void post_lease(mql_client *c, const mql_lease *l, mql_lease_state state) {
    mql_event *ev = mql_event_new(MQL_EV_LEASE, 0);
    ev->lease_id = l->id;
    ev->lease_state = state;
    ev->lease_renewals = l->renewals;
    mql_events_push(&c->events, ev);
}

/* The result of a finished call: the transport status first, then the in-band one. */
static void call_result(mql_call *call, const mql_pb_status *st, mql_result *r, const char *what) {
    if (call->status != GRPC_STATUS_OK) {
        char *details = grpc_slice_to_c_string(call->details);
        mql_result_fail(r, mql_grpc_code_name(call->status), "%s: %s", what,
                        details && *details ? details : "transport failure");
        gpr_free(details);
        return;
    }
    mql_result_from_status(r, st, what);
}

/* ------------------------------------------------------------ call plumbing */

static void on_call_done(mql_call *call);
static void on_call_message(mql_call *call, grpc_byte_buffer *reply);

static mql_call *call_new(mql_client *c, grpc_channel *ch, const char *method,
                          int64_t timeout_ms, call_kind kind, uint64_t op, void *ctx) {
    mql_call *call = mql_call_new(ch, c->cq, method, timeout_ms, &c->id);
    call->owner = c;
    call->kind = kind;
    call->op = op;
    call->ctx = ctx;
    call->on_done = on_call_done;
    call->on_message = on_call_message;
    call->next = c->calls;
    if (c->calls) c->calls->prev = call;
    c->calls = call;
    return call;
}

static void call_unlink(mql_client *c, mql_call *call) {
    if (call->prev) call->prev->next = call->next;
    else c->calls = call->next;
    if (call->next) call->next->prev = call->prev;
    call->prev = call->next = NULL;
}

/* Starts a unary call; on a refused start the call is dropped and -1 returned. */
static int unary(mql_client *c, mql_call *call, const ProtobufCMessage *req) {
    if (mql_call_start_unary(call, req) == 0) return 0;
    call_unlink(c, call);
    mql_call_free(call);
    return -1;
}

/* ------------------------------------------------------------- the session */

static void fail_start(mql_client *c, const mql_result *r) {
    if (c->state != MQL_CLIENT_STARTING) return;
    c->state = MQL_CLIENT_FAILED;
    post_op(c, c->start_op, r);
}

static void telemetry_open(mql_client *c);

/* QueryRoute for topic: the session's own (op 0) picks the broker; a host's
 * op only learns whether the topic exists. */
static int route_start(mql_client *c, const char *topic_name, uint64_t op) {
    Apache__Rocketmq__V2__QueryRouteRequest req = APACHE__ROCKETMQ__V2__QUERY_ROUTE_REQUEST__INIT;
    pb_resource topic;
    endpoints_buf ep;
    set_resource(&topic, c->namespace_, topic_name);
    set_endpoints(&ep, c->host, c->port);
    req.topic = &topic;
    req.endpoints = &ep.ep;
    return unary(c, call_new(c, c->access, M_QUERY_ROUTE, c->request_timeout_ms, K_ROUTE, op, NULL),
                 &req.base);
}

static void session_route_start(mql_client *c) {
    mql_result r;
    if (route_start(c, c->topic, 0) < 0) {
        mql_result_fail(&r, "INTERNAL", "QueryRoute: grpc refused to start the call");
        fail_start(c, &r);
    }
}

uint64_t mql_client_route(mql_client *c, const char *topic) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        op = post_now(c, "CLOSED", "route: the client is closed");
    } else {
        op = ++c->next_op;
        if (route_start(c, topic, op) < 0)
            op = post_now(c, "INTERNAL", "QueryRoute: grpc refused to start the call");
    }
    pthread_mutex_unlock(&c->mu);
    return op;
}

static int queue_readable(const Apache__Rocketmq__V2__MessageQueue *q) {
    return q->broker && q->broker->id == 0 &&
           (q->permission == APACHE__ROCKETMQ__V2__PERMISSION__READ ||
            q->permission == APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE);
}

static grpc_channel *channel_new(const char *target) {
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_arg args[2];
    grpc_channel_args ca;
    grpc_channel *ch;
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = 130 * 1024 * 1024;   /* the proxy's own inbound limit */
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_KEEPALIVE_TIME_MS;
    args[1].value.integer = 30000;
    ca.num_args = 2;
    ca.args = args;
    ch = grpc_channel_create(target, cr, &ca);
    grpc_channel_credentials_release(cr);
    return ch;
}

static void on_route_done(mql_client *c, mql_call *call) {
    Apache__Rocketmq__V2__QueryRouteResponse *resp = (void *)mql_unpack(
        &apache__rocketmq__v2__query_route_response__descriptor, call->recv_buf);
    mql_result r;
    size_t i;
    call_result(call, resp ? resp->status : NULL, &r, "QueryRoute");
    if (call->op) {
        /* a host's question: does the topic exist? */
        if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
        if (!r.ok) mql_metrics_error(&c->metrics, "route", r.code);
        post_op(c, call->op, &r);
        return;
    }
    if (r.ok) {
        const Apache__Rocketmq__V2__MessageQueue *q = NULL;
        for (i = 0; i < resp->n_message_queues && !q; i++)
            if (queue_readable(resp->message_queues[i])) q = resp->message_queues[i];
        if (!q) {
            mql_result_fail(&r, "FORBIDDEN", "QueryRoute: topic %s has no readable queue",
                            c->topic);
        } else {
            const Apache__Rocketmq__V2__Endpoints *ep = q->broker->endpoints;
            free(c->broker_name);
            c->broker_name = mql_strdup(q->broker->name);
            if (ep && ep->n_addresses > 0) {
                char target[300];
                snprintf(target, sizeof(target), "%s:%d", ep->addresses[0]->host,
                         ep->addresses[0]->port);
                if (strcmp(target, c->endpoint) != 0) c->broker = channel_new(target);
            }
        }
    }
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (!r.ok) {
        fail_start(c, &r);
        return;
    }
    telemetry_open(c);
}

static void telemetry_send_settings(mql_client *c) {
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
    pb_resource group, topic, *pub_topics[64], pub_topic_store[64];
    pb_duration timeout, poll, b_init, b_max;
    endpoints_buf ep;
    size_t i;

    set_endpoints(&ep, c->host, c->port);
    set_duration(&timeout, c->request_timeout_ms);
    s.access_point = &ep.ep;
    s.request_timeout = &timeout;
    ua.language = APACHE__ROCKETMQ__V2__LANGUAGE__CPP;
    ua.version = (char *)MQL_VERSION;
    ua.platform = (char *)"Linux (mqlease)";
    ua.hostname = c->hostname;
    s.user_agent = &ua;
    if (c->type == MQL_CONSUMER) {
        s.client_type = APACHE__ROCKETMQ__V2__CLIENT_TYPE__SIMPLE_CONSUMER;
        set_resource(&group, c->namespace_, c->group);
        set_resource(&topic, c->namespace_, c->topic);
        fe.type = c->filter_sql ? APACHE__ROCKETMQ__V2__FILTER_TYPE__SQL
                                : APACHE__ROCKETMQ__V2__FILTER_TYPE__TAG;
        fe.expression = c->filter;
        entry.topic = &topic;
        entry.expression = &fe;
        sub.group = &group;
        sub.n_subscriptions = 1;
        sub.subscriptions = entries;
        set_duration(&poll, 20000);
        sub.long_polling_timeout = &poll;
        s.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION;
        s.subscription = &sub;
    } else {
        s.client_type = APACHE__ROCKETMQ__V2__CLIENT_TYPE__PRODUCER;
        for (i = 0; i < c->ntopics && i < 64; i++) {
            set_resource(&pub_topic_store[i], c->namespace_, c->topics[i]);
            pub_topics[i] = &pub_topic_store[i];
        }
        pub.n_topics = i;
        pub.topics = pub_topics;
        s.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_PUBLISHING;
        s.publishing = &pub;
        /* the official producers send their retry policy; the proxy answers with its own */
        set_duration(&b_init, 10);
        set_duration(&b_max, 1000);
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
    c->telemetry = call_new(c, c->broker, M_TELEMETRY, -1, K_TELEMETRY, 0, NULL);
    if (mql_call_start_bidi(c->telemetry) < 0) {
        call_unlink(c, c->telemetry);
        mql_call_free(c->telemetry);
        c->telemetry = NULL;
        mql_result_fail(&r, "INTERNAL", "Telemetry: grpc refused to start the stream");
        fail_start(c, &r);
        c->telemetry_retry_at = mql_now_ms() + TELEMETRY_RETRY_MS;
        return;
    }
    telemetry_send_settings(c);
}

static void on_telemetry_message(mql_client *c, grpc_byte_buffer *reply) {
    Apache__Rocketmq__V2__TelemetryCommand *cmd = (void *)mql_unpack(
        &apache__rocketmq__v2__telemetry_command__descriptor, reply);
    mql_result r;
    if (!cmd) return;
    if (cmd->status && cmd->status->code != APACHE__ROCKETMQ__V2__CODE__OK) {
        mql_result_from_status(&r, cmd->status, "Telemetry");
        fail_start(c, &r);
    } else if (cmd->command_case == APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS &&
               c->state == MQL_CLIENT_STARTING) {
        /* the proxy stored our settings: receives and heartbeats work from now on */
        c->state = MQL_CLIENT_READY;
        c->heartbeat_at = mql_now_ms();
        mql_result_ok(&r);
        post_op(c, c->start_op, &r);
    }
    protobuf_c_message_free_unpacked(&cmd->base, NULL);
}

static void on_telemetry_done(mql_client *c, mql_call *call) {
    mql_result r;
    c->telemetry = NULL;
    call_result(call, NULL, &r, "Telemetry");
    if (r.ok) mql_result_fail(&r, "UNAVAILABLE", "Telemetry: the server closed the stream");
    fail_start(c, &r);
    if (!c->stopping && c->state == MQL_CLIENT_READY)
        c->telemetry_retry_at = mql_now_ms() + TELEMETRY_RETRY_MS;
}

static void heartbeat_start(mql_client *c) {
    Apache__Rocketmq__V2__HeartbeatRequest req = APACHE__ROCKETMQ__V2__HEARTBEAT_REQUEST__INIT;
    pb_resource group;
    if (c->type == MQL_CONSUMER) {
        set_resource(&group, c->namespace_, c->group);
        req.group = &group;
        req.client_type = APACHE__ROCKETMQ__V2__CLIENT_TYPE__SIMPLE_CONSUMER;
    } else {
        req.client_type = APACHE__ROCKETMQ__V2__CLIENT_TYPE__PRODUCER;
    }
    unary(c, call_new(c, c->broker, M_HEARTBEAT, c->request_timeout_ms, K_HEARTBEAT, 0, NULL),
          &req.base);
}

static void on_heartbeat_done(mql_client *c, mql_call *call) {
    Apache__Rocketmq__V2__HeartbeatResponse *resp = (void *)mql_unpack(
        &apache__rocketmq__v2__heartbeat_response__descriptor, call->recv_buf);
    mql_result r;
    call_result(call, resp ? resp->status : NULL, &r, "Heartbeat");
    if (!r.ok && !c->stopping) mql_metrics_error(&c->metrics, "heartbeat", r.code);
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* ---------------------------------------------------------------- receive */

/* When a lease renewed (or acquired) at from_ms renews next: a little before
 * renew_every at random, so leases received together do not renew in lock-step. */
static int64_t next_renew_at(mql_client *c, int64_t from_ms) {
    int64_t every = c->renew_every_ms, jitter = every / 10;
    return from_ms + every - (jitter > 0 ? (int64_t)(next_random(c) % (uint64_t)jitter) : 0);
}

static void on_receive_message(mql_client *c, mql_call *call, grpc_byte_buffer *reply) {
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
        mql_lease_arm(&c->leases, l, c->renew ? next_renew_at(c, l->acquired_ms) : l->deadline_ms);
        m->lease_id = l->id;
        c->metrics.received++;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

static void on_receive_done(mql_client *c, mql_call *call) {
    receive_ctx *rx = call->ctx;
    mql_event *ev = mql_event_new(MQL_EV_OP, call->op);
    if (call->status != GRPC_STATUS_OK) {
        call_result(call, NULL, &ev->result, "ReceiveMessage");
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
    pb_resource group, topic;
    pb_duration invisible, poll;
    mql_call *call;
    uint64_t op;

    pthread_mutex_lock(&c->mu);
    if (c->stopping || c->state != MQL_CLIENT_READY || c->type != MQL_CONSUMER) {
        op = post_now(c, c->stopping ? "CLOSED" : "NOT_READY",
                      "receive: the consumer is not ready");
        pthread_mutex_unlock(&c->mu);
        return op;
    }
    op = ++c->next_op;
    set_resource(&group, c->namespace_, c->group);
    set_resource(&topic, c->namespace_, c->topic);
    broker.name = c->broker_name;
    mq.topic = &topic;
    mq.broker = &broker;
    mq.permission = APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE;
    fe.type = c->filter_sql ? APACHE__ROCKETMQ__V2__FILTER_TYPE__SQL
                            : APACHE__ROCKETMQ__V2__FILTER_TYPE__TAG;
    fe.expression = c->filter;
    set_duration(&invisible, c->invisible_ms);
    set_duration(&poll, await_ms);
    req.group = &group;
    req.message_queue = &mq;
    req.filter_expression = &fe;
    req.batch_size = batch;
    req.invisible_duration = &invisible;
    req.auto_renew = 0;   /* the lease is ours to renew, not the proxy's */
    req.long_polling_timeout = &poll;
    /* The proxy needs a deadline longer than the long poll, or it fails the
     * call; and it never polls for less than 5 s, whatever we ask. */
    call = call_new(c, c->broker, M_RECEIVE,
                    (await_ms > MIN_PROXY_POLL_MS ? await_ms : MIN_PROXY_POLL_MS) +
                        c->request_timeout_ms,
                    K_RECEIVE, op,
                    mql_xcalloc(1, sizeof(receive_ctx)));
    if (mql_call_start_server_stream(call, &req.base) < 0) {
        free(call->ctx);
        call_unlink(c, call);
        mql_call_free(call);
        pthread_mutex_unlock(&c->mu);
        return post_now(c, "INTERNAL", "receive: grpc refused to start the call");
    }
    pthread_mutex_unlock(&c->mu);
    return op;
}

/* ----------------------------------------------------------- lease timers */

static void lease_end(mql_client *c, mql_lease *l, mql_lease_state final) {
    post_lease(c, l, final);
    mql_lease_remove(&c->leases, l);
}

static void release_fail_lease(mql_client *c, uint64_t lease_id, const char *code,
                               const char *msg);
static void deferred_run(mql_client *c);
static void renew_start(mql_client *c, mql_lease *l, int64_t now);
static int change_start(mql_client *c, mql_lease *l, int64_t duration_ms, call_kind kind,
                        release *rel);

static int budget_spent(const mql_client *c, const mql_lease *l, int64_t now) {
    if (c->max_renewals >= 0 && l->renewals >= c->max_renewals) return 1;
    if (c->max_lease_ms > 0 && now + c->invisible_ms - l->acquired_ms > c->max_lease_ms) return 1;
    return 0;
}

/* One timer of one lease is due: the deadline passed, or it is time to renew. */
static void lease_timer(mql_client *c, mql_lease *l, int64_t now) {
    mql_lease_disarm(&c->leases, l);
    if (now >= l->deadline_ms) {
        /* The broker has given the message to someone else by now. */
        if (l->state != MQL_LEASE_EXPIRING || !l->let_go) c->metrics.expire_while_alive++;
        c->metrics.lost_expired++;
        release_fail_lease(c, l->id, "LEASE_LOST", "the lease expired before the release");
        lease_end(c, l, MQL_LEASE_LOST);
        return;
    }
    if (l->state != MQL_LEASE_HELD || l->pending != MQL_PENDING_NONE || !c->renew) {
        mql_lease_arm(&c->leases, l, l->deadline_ms);
        return;
    }
    if (budget_spent(c, l, now)) {
        l->state = MQL_LEASE_EXPIRING;
        post_lease(c, l, MQL_LEASE_EXPIRING);
        if (c->on_budget == MQL_BUDGET_NACK) {
            c->metrics.budget_nack++;
            l->pending = MQL_PENDING_NACK;
            if (change_start(c, l, c->budget_nack_delay_ms, K_BUDGET_NACK, NULL) == 0) return;
            l->pending = MQL_PENDING_NONE;
        } else {
            c->metrics.budget_expire++;
        }
        mql_lease_arm(&c->leases, l, l->deadline_ms);
        return;
    }
    renew_start(c, l, now);
}

/* ChangeInvisibleDuration with the lease's newest handle. A nack for the host
 * carries its release as context; a renewal or the budget's nack the lease id. */
static int change_start(mql_client *c, mql_lease *l, int64_t duration_ms, call_kind kind,
                        release *rel) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationRequest req =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_REQUEST__INIT;
    pb_resource group, topic;
    pb_duration d;
    void *ctx = rel;
    set_resource(&group, c->namespace_, c->group);
    set_resource(&topic, c->namespace_, l->topic);
    set_duration(&d, duration_ms);
    req.group = &group;
    req.topic = &topic;
    req.receipt_handle = l->handle;
    req.message_id = l->message_id;
    req.invisible_duration = &d;
    if (!rel) {
        uint64_t *id = mql_xmalloc(sizeof(*id));
        *id = l->id;
        ctx = id;
    }
    if (unary(c, call_new(c, c->broker, M_CHANGE, c->request_timeout_ms, kind, 0, ctx),
              &req.base) < 0) {
        if (!rel) free(ctx);
        return -1;
    }
    return 0;
}

static void renew_start(mql_client *c, mql_lease *l, int64_t now) {
    l->renew_sent_ms = now;
    mql_hist_observe(&c->metrics.renew_lateness, (double)(now - l->timer_ms) / 1000.0);
    if (change_start(c, l, c->invisible_ms, K_RENEW, NULL) < 0) {
        mql_lease_arm(&c->leases, l, now + RENEW_BACKOFF_MIN_MS);
        return;
    }
    l->state = MQL_LEASE_RENEWING;
    /* no timer while renewing: the reply (or the call's own deadline) re-arms it */
}

static void on_renew_done(mql_client *c, mql_call *call) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse *resp = (void *)mql_unpack(
        &apache__rocketmq__v2__change_invisible_duration_response__descriptor, call->recv_buf);
    uint64_t id = *(uint64_t *)call->ctx;
    mql_lease *l = mql_lease_find(&c->leases, id);
    int64_t now = mql_now_ms();
    mql_result r;
    call_result(call, resp ? resp->status : NULL, &r, "ChangeInvisibleDuration");
    free(call->ctx);
    call->ctx = NULL;
    if (!l || l->state != MQL_LEASE_RENEWING) goto out;   /* gone meanwhile */
    l->state = MQL_LEASE_HELD;
    if (r.ok && resp->receipt_handle && *resp->receipt_handle) {
        /* The old handle is dead to us from this instant: the proxy would still
         * accept it, but an ack with it does nothing and a change arms a
         * second deadline. */
        char *handle = mql_handle_after_change(resp->receipt_handle);
        mql_lease_set_handle(l, handle);
        free(handle);
        l->deadline_ms = l->renew_sent_ms + c->invisible_ms;
        l->renewals++;
        l->attempts = 0;
        c->metrics.renew_success++;
        mql_hist_observe(&c->metrics.renew_latency, (double)(now - l->renew_sent_ms) / 1000.0);
        mql_lease_arm(&c->leases, l, next_renew_at(c, l->renew_sent_ms));
    } else if (strcmp(r.code, "INVALID_RECEIPT_HANDLE") == 0) {
        /* final: the broker no longer knows this delivery; no retry storm */
        c->metrics.renew_fail++;
        c->metrics.lost_rejected++;
        if (l->pending == MQL_PENDING_NONE) c->metrics.expire_while_alive++;
        release_fail_lease(c, l->id, "LEASE_LOST", "the broker rejected the receipt handle");
        lease_end(c, l, MQL_LEASE_LOST);
        l = NULL;
    } else {
        /* A reply that never came may still have minted a handle we never saw;
         * the message may come back once more. Count it apart. */
        int uncertain = strcmp(r.code, "TIMEOUT") == 0 || strcmp(r.code, "CANCELLED") == 0;
        int64_t backoff = RENEW_BACKOFF_MIN_MS << (l->attempts < 5 ? l->attempts : 5);
        if (uncertain) c->metrics.renew_uncertain++;
        else c->metrics.renew_fail++;
        mql_metrics_error(&c->metrics, "renew", r.code);
        if (backoff > RENEW_BACKOFF_MAX_MS) backoff = RENEW_BACKOFF_MAX_MS;
        l->attempts++;
        if (now + backoff + c->request_timeout_ms < l->deadline_ms)
            mql_lease_arm(&c->leases, l, now + backoff);
        else
            mql_lease_arm(&c->leases, l, l->deadline_ms);
    }
out:
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    deferred_run(c);
}

static int64_t run_timers(mql_client *c, int64_t now) {
    int64_t wake = now + MAX_IDLE_WAIT_MS;
    mql_lease *l;
    if (c->stopping) return now + 50;
    if (c->telemetry_retry_at && now >= c->telemetry_retry_at) telemetry_open(c);
    if (c->heartbeat_at && now >= c->heartbeat_at && c->state == MQL_CLIENT_READY) {
        heartbeat_start(c);
        c->heartbeat_at = now + HEARTBEAT_EVERY_MS;
    }
    while ((l = mql_lease_next(&c->leases)) && l->timer_ms <= now) lease_timer(c, l, now);
    if (c->telemetry_retry_at && c->telemetry_retry_at < wake) wake = c->telemetry_retry_at;
    if (c->heartbeat_at && c->heartbeat_at < wake) wake = c->heartbeat_at;
    if ((l = mql_lease_next(&c->leases)) && l->timer_ms < wake) wake = l->timer_ms;
    return wake;
}

/* ---------------------------------------------------------------- release */

static void release_free(release *rel) {
    free(rel->ids);
    free(rel->entries);
    free(rel->settled);
    free(rel);
}

static int release_done(const release *rel) {
    size_t i;
    for (i = 0; i < rel->n; i++)
        if (!rel->settled[i]) return 0;
    return 1;
}

static void release_post(mql_client *c, release *rel) {
    mql_event *ev = mql_event_new(MQL_EV_OP, rel->op);
    size_t i;
    for (i = 0; i < rel->n; i++) {
        if (!rel->entries[i].ok) {
            ev->result = rel->entries[i];
            break;
        }
    }
    ev->entries = rel->entries;
    ev->nentries = rel->n;
    rel->entries = NULL;
    mql_events_push(&c->events, ev);
}

static void settle(mql_client *c, release *rel, size_t i, const mql_result *r) {
    if (rel->settled[i]) return;
    rel->settled[i] = 1;
    rel->entries[i] = *r;
    if (rel->is_ack) {
        if (r->ok) c->metrics.acks_ok++;
        else c->metrics.acks_fail++;
    } else {
        if (r->ok) c->metrics.nacks_ok++;
        else c->metrics.nacks_fail++;
    }
    if (!r->ok) mql_metrics_error(&c->metrics, rel->is_ack ? "ack" : "nack", r->code);
}

/* A lease that ended on its own fails every deferred release that waits for it. */
static void release_fail_lease(mql_client *c, uint64_t lease_id, const char *code,
                               const char *msg) {
    release **pp = &c->deferred;
    mql_result r;
    size_t i;
    mql_result_fail(&r, code, "%s", msg);
    while (*pp) {
        release *rel = *pp;
        for (i = 0; i < rel->n; i++)
            if (rel->ids[i] == lease_id) settle(c, rel, i, &r);
        if (release_done(rel)) {
            *pp = rel->next;
            release_post(c, rel);
            release_free(rel);
        } else {
            pp = &rel->next;
        }
    }
}

/* After a release failed for a reason that leaves the lease ours, keep renewing. */
static void lease_resume(mql_client *c, mql_lease *l) {
    int64_t now = mql_now_ms();
    l->pending = MQL_PENDING_NONE;
    if (l->state == MQL_LEASE_EXPIRING || !c->renew) mql_lease_arm(&c->leases, l, l->deadline_ms);
    else mql_lease_arm(&c->leases, l, now);
}

static void release_settle_lease(mql_client *c, release *rel, size_t i, mql_lease *l,
                                 const mql_result *r) {
    settle(c, rel, i, r);
    if (!l) return;
    if (r->ok) {
        mql_hist_observe(&c->metrics.handler,
                         (double)(mql_now_ms() - l->acquired_ms) / 1000.0);
        lease_end(c, l, rel->is_ack ? MQL_LEASE_ACKED : MQL_LEASE_RELEASED);
    } else if (strcmp(r->code, "INVALID_RECEIPT_HANDLE") == 0) {
        c->metrics.lost_rejected++;
        lease_end(c, l, MQL_LEASE_LOST);
    } else {
        lease_resume(c, l);
    }
}

static void ack_send(mql_client *c, release *rel) {
    Apache__Rocketmq__V2__AckMessageRequest req = APACHE__ROCKETMQ__V2__ACK_MESSAGE_REQUEST__INIT;
    Apache__Rocketmq__V2__AckMessageEntry *store, **entries;
    pb_resource group, topic;
    mql_call *call;
    size_t i, n = 0;
    const char *topic_name = NULL;
    mql_result r;
    store = mql_xcalloc(rel->n, sizeof(*store));
    entries = mql_xcalloc(rel->n, sizeof(*entries));
    for (i = 0; i < rel->n; i++) {
        mql_lease *l;
        if (rel->settled[i]) continue;
        l = mql_lease_find(&c->leases, rel->ids[i]);
        apache__rocketmq__v2__ack_message_entry__init(&store[n]);
        store[n].message_id = l->message_id;
        store[n].receipt_handle = l->handle;   /* the newest: renewals are done by now */
        entries[n] = &store[n];
        topic_name = l->topic;
        n++;
    }
    set_resource(&group, c->namespace_, c->group);
    set_resource(&topic, c->namespace_, topic_name);
    req.group = &group;
    req.topic = &topic;
    req.n_entries = n;
    req.entries = entries;
    call = call_new(c, c->broker, M_ACK, c->request_timeout_ms, K_ACK, rel->op, rel);
    if (unary(c, call, &req.base) < 0) {
        mql_result_fail(&r, "INTERNAL", "ack: grpc refused to start the call");
        for (i = 0; i < rel->n; i++)
            release_settle_lease(c, rel, i, mql_lease_find(&c->leases, rel->ids[i]), &r);
        release_post(c, rel);
        release_free(rel);
    }
    free(store);
    free(entries);
}

static void on_ack_done(mql_client *c, mql_call *call) {
    release *rel = call->ctx;
    Apache__Rocketmq__V2__AckMessageResponse *resp = (void *)mql_unpack(
        &apache__rocketmq__v2__ack_message_response__descriptor, call->recv_buf);
    mql_result top, r;
    size_t i, j;
    call_result(call, resp ? resp->status : NULL, &top, "AckMessage");
    for (i = 0; i < rel->n; i++) {
        mql_lease *l;
        if (rel->settled[i]) continue;
        l = mql_lease_find(&c->leases, rel->ids[i]);
        r = top;
        /* Entries are answered in parallel by the proxy: match them by message id. */
        if (resp && call->status == GRPC_STATUS_OK && l) {
            for (j = 0; j < resp->n_entries; j++) {
                if (resp->entries[j]->message_id &&
                    strcmp(resp->entries[j]->message_id, l->message_id) == 0) {
                    mql_result_from_status(&r, resp->entries[j]->status, "AckMessage");
                    break;
                }
            }
        }
        release_settle_lease(c, rel, i, l, &r);
    }
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    call->ctx = NULL;
    release_post(c, rel);
    release_free(rel);
}

static void nack_send(mql_client *c, release *rel) {
    mql_lease *l = mql_lease_find(&c->leases, rel->ids[0]);
    mql_result r;
    if (change_start(c, l, rel->delay_ms, K_NACK, rel) < 0) {
        mql_result_fail(&r, "INTERNAL", "nack: grpc refused to start the call");
        release_settle_lease(c, rel, 0, l, &r);
        release_post(c, rel);
        release_free(rel);
    }
}

static void on_nack_done(mql_client *c, mql_call *call) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse *resp = (void *)mql_unpack(
        &apache__rocketmq__v2__change_invisible_duration_response__descriptor, call->recv_buf);
    release *rel = call->ctx;
    mql_result r;
    call_result(call, resp ? resp->status : NULL, &r, "ChangeInvisibleDuration");
    release_settle_lease(c, rel, 0, mql_lease_find(&c->leases, rel->ids[0]), &r);
    release_post(c, rel);
    release_free(rel);
    call->ctx = NULL;
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* The budget's own nack: no host op waits for it. */
static void on_budget_nack_done(mql_client *c, mql_call *call) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse *resp = (void *)mql_unpack(
        &apache__rocketmq__v2__change_invisible_duration_response__descriptor, call->recv_buf);
    mql_lease *l = mql_lease_find(&c->leases, *(uint64_t *)call->ctx);
    mql_result r;
    call_result(call, resp ? resp->status : NULL, &r, "ChangeInvisibleDuration");
    free(call->ctx);
    call->ctx = NULL;
    if (l && r.ok) lease_end(c, l, MQL_LEASE_RELEASED);
    else if (l) lease_resume(c, l);
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* Sends the release if none of its leases is being renewed; else keeps it
 * deferred. Returns 1 if it was sent (or finished). */
static int release_try(mql_client *c, release *rel) {
    size_t i;
    for (i = 0; i < rel->n; i++) {
        mql_lease *l;
        if (rel->settled[i]) continue;
        l = mql_lease_find(&c->leases, rel->ids[i]);
        if (l && l->state == MQL_LEASE_RENEWING) return 0;
    }
    if (release_done(rel)) {
        release_post(c, rel);
        release_free(rel);
    } else if (rel->is_ack) {
        ack_send(c, rel);
    } else {
        nack_send(c, rel);
    }
    return 1;
}

static void deferred_run(mql_client *c) {
    release **pp = &c->deferred;
    while (*pp) {
        release *rel = *pp;
        release *next = rel->next;
        if (release_try(c, rel)) *pp = next;
        else pp = &rel->next;
    }
}

static uint64_t release_start(mql_client *c, const uint64_t *ids, size_t n, int is_ack,
                              int64_t delay_ms) {
    release *rel = mql_xcalloc(1, sizeof(*rel));
    mql_result r;
    uint64_t op;
    size_t i;
    rel->op = ++c->next_op;
    rel->is_ack = is_ack;
    rel->delay_ms = delay_ms;
    rel->n = n;
    rel->ids = mql_xcalloc(n, sizeof(*rel->ids));
    rel->entries = mql_xcalloc(n, sizeof(*rel->entries));
    rel->settled = mql_xcalloc(n, sizeof(*rel->settled));
    for (i = 0; i < n; i++) {
        mql_lease *l = mql_lease_find(&c->leases, ids[i]);
        rel->ids[i] = ids[i];
        if (c->stopping) {
            mql_result_fail(&r, "CLOSED", "the consumer is closed");
            settle(c, rel, i, &r);
        } else if (!l) {
            mql_result_fail(&r, "NO_LEASE", "no lease %llu: already acked, released or lost",
                            (unsigned long long)ids[i]);
            settle(c, rel, i, &r);
        } else if (l->pending != MQL_PENDING_NONE) {
            mql_result_fail(&r, "BUSY", "a release of this lease is already under way");
            settle(c, rel, i, &r);
        } else {
            /* from now on nothing renews it: the release decides its fate */
            l->pending = is_ack ? MQL_PENDING_ACK : MQL_PENDING_NACK;
            if (l->state != MQL_LEASE_RENEWING) mql_lease_arm(&c->leases, l, l->deadline_ms);
        }
    }
    op = rel->op;   /* rel may be gone once tried */
    if (!release_try(c, rel)) {
        rel->next = c->deferred;
        c->deferred = rel;
    }
    return op;
}

uint64_t mql_client_ack(mql_client *c, const uint64_t *lease_ids, size_t n) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    op = release_start(c, lease_ids, n, 1, 0);
    pthread_mutex_unlock(&c->mu);
    return op;
}

uint64_t mql_client_nack(mql_client *c, uint64_t lease_id, int64_t delay_ms) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    op = release_start(c, &lease_id, 1, 0, delay_ms);
    pthread_mutex_unlock(&c->mu);
    return op;
}

int mql_client_let_expire(mql_client *c, uint64_t lease_id) {
    mql_lease *l;
    int found = 0;
    pthread_mutex_lock(&c->mu);
    l = mql_lease_find(&c->leases, lease_id);
    if (l && l->pending == MQL_PENDING_NONE) {
        found = 1;
        l->let_go = 1;
        if (l->state == MQL_LEASE_HELD) l->state = MQL_LEASE_EXPIRING;
        if (l->state != MQL_LEASE_RENEWING) mql_lease_arm(&c->leases, l, l->deadline_ms);
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

/* ------------------------------------------------------------------- send */

static void make_message_id(mql_client *c, char *out) {
    /* The v1 layout of the official clients: 01 + node(6) + pid(2) + seconds
     * since 2021-01-01 (4) + sequence (4), 34 upper-case hex digits. */
    static const char digits[] = "0123456789ABCDEF";
    uint8_t b[17];
    uint32_t secs = (uint32_t)(mql_wall_ms() / 1000 - 1609459200);
    uint32_t seq = c->id_seq++;
    uint16_t pid = (uint16_t)getpid();
    int i;
    b[0] = 1;
    memcpy(b + 1, c->id_node, 6);
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

uint64_t mql_client_send(mql_client *c, const char *topic_name, const uint8_t *body, size_t len,
                         const char *tag, const char **keys, size_t nkeys,
                         const mql_kv *props, size_t nprops) {
    Apache__Rocketmq__V2__SendMessageRequest req = APACHE__ROCKETMQ__V2__SEND_MESSAGE_REQUEST__INIT;
    Apache__Rocketmq__V2__Message msg = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    Apache__Rocketmq__V2__Message *msgs[1] = {&msg};
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Apache__Rocketmq__V2__Message__UserPropertiesEntry *pstore, **pptrs;
    Google__Protobuf__Timestamp born = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    pb_resource topic;
    char id[35];
    int64_t now = mql_wall_ms();
    mql_call *call;
    uint64_t op;
    size_t i;

    pthread_mutex_lock(&c->mu);
    if (c->stopping || c->state != MQL_CLIENT_READY) {
        op = post_now(c, c->stopping ? "CLOSED" : "NOT_READY", "send: the producer is not ready");
        pthread_mutex_unlock(&c->mu);
        return op;
    }
    op = ++c->next_op;
    make_message_id(c, id);
    set_resource(&topic, c->namespace_, topic_name);
    pstore = mql_xcalloc(nprops, sizeof(*pstore));
    pptrs = mql_xcalloc(nprops, sizeof(*pptrs));
    for (i = 0; i < nprops; i++) {
        apache__rocketmq__v2__message__user_properties_entry__init(&pstore[i]);
        pstore[i].key = props[i].key;
        pstore[i].value = props[i].value;
        pptrs[i] = &pstore[i];
    }
    born.seconds = now / 1000;
    born.nanos = (int32_t)((now % 1000) * 1000000);
    sp.tag = (char *)(tag ? tag : "");
    sp.n_keys = nkeys;
    sp.keys = (char **)keys;
    sp.message_id = id;
    sp.body_encoding = APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL;
    sp.born_timestamp = &born;
    sp.born_host = c->hostname;
    msg.topic = &topic;
    msg.system_properties = &sp;
    msg.n_user_properties = nprops;
    msg.user_properties = pptrs;
    msg.body.data = (uint8_t *)body;
    msg.body.len = len;
    req.n_messages = 1;
    req.messages = msgs;
    call = call_new(c, c->broker, M_SEND, c->request_timeout_ms, K_SEND, op, NULL);
    if (unary(c, call, &req.base) < 0)
        op = post_now(c, "INTERNAL", "send: grpc refused to start the call");
    pthread_mutex_unlock(&c->mu);
    free(pstore);
    free(pptrs);
    return op;
}

static void on_send_done(mql_client *c, mql_call *call) {
    Apache__Rocketmq__V2__SendMessageResponse *resp = (void *)mql_unpack(
        &apache__rocketmq__v2__send_message_response__descriptor, call->recv_buf);
    mql_event *ev = mql_event_new(MQL_EV_OP, call->op);
    call_result(call, resp ? resp->status : NULL, &ev->result, "SendMessage");
    if (ev->result.ok && resp->n_entries > 0) {
        const Apache__Rocketmq__V2__SendResultEntry *e = resp->entries[0];
        if (e->status) mql_result_from_status(&ev->result, e->status, "SendMessage");
        ev->text = mql_strdup(e->message_id ? e->message_id : "");
        ev->number = e->offset;
    } else if (ev->result.ok) {
        mql_result_fail(&ev->result, "PROTOCOL", "SendMessage: the server sent no entry");
    }
    if (ev->result.ok) c->metrics.sent_ok++;
    else {
        c->metrics.sent_fail++;
        mql_metrics_error(&c->metrics, "send", ev->result.code);
    }
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    mql_events_push(&c->events, ev);
}

/* -------------------------------------------------------------- terminate */

uint64_t mql_client_terminate(mql_client *c) {
    Apache__Rocketmq__V2__NotifyClientTerminationRequest req =
        APACHE__ROCKETMQ__V2__NOTIFY_CLIENT_TERMINATION_REQUEST__INIT;
    pb_resource group;
    mql_call *call;
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    if (c->stopping || c->state != MQL_CLIENT_READY) {
        op = post_now(c, c->stopping ? "CLOSED" : "NOT_READY", "terminate: not connected");
        pthread_mutex_unlock(&c->mu);
        return op;
    }
    op = ++c->next_op;
    if (c->type == MQL_CONSUMER) {
        set_resource(&group, c->namespace_, c->group);
        req.group = &group;
    }
    call = call_new(c, c->broker, M_TERMINATE, c->request_timeout_ms, K_TERMINATE, op, NULL);
    if (unary(c, call, &req.base) < 0) {
        op = post_now(c, "INTERNAL", "terminate: grpc refused to start the call");
    } else {
        c->heartbeat_at = 0;   /* a heartbeat now would register us again */
    }
    pthread_mutex_unlock(&c->mu);
    return op;
}

static void on_terminate_done(mql_client *c, mql_call *call) {
    Apache__Rocketmq__V2__NotifyClientTerminationResponse *resp = (void *)mql_unpack(
        &apache__rocketmq__v2__notify_client_termination_response__descriptor, call->recv_buf);
    mql_result r;
    call_result(call, resp ? resp->status : NULL, &r, "NotifyClientTermination");
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    post_op(c, call->op, &r);
}

/* --------------------------------------------------------------- dispatch */

static void on_call_message(mql_call *call, grpc_byte_buffer *reply) {
    mql_client *c = call->owner;
    if (call->kind == K_RECEIVE) on_receive_message(c, call, reply);
    else if (call->kind == K_TELEMETRY) on_telemetry_message(c, reply);
}

static void on_call_done(mql_call *call) {
    mql_client *c = call->owner;
    call_unlink(c, call);
    switch ((call_kind)call->kind) {
    case K_ROUTE: on_route_done(c, call); break;
    case K_TELEMETRY: on_telemetry_done(c, call); break;
    case K_HEARTBEAT: on_heartbeat_done(c, call); break;
    case K_RECEIVE: on_receive_done(c, call); break;
    case K_ACK: on_ack_done(c, call); break;
    case K_NACK: on_nack_done(c, call); break;
    case K_BUDGET_NACK: on_budget_nack_done(c, call); break;
    case K_RENEW: on_renew_done(c, call); break;
    case K_SEND: on_send_done(c, call); break;
    case K_TERMINATE: on_terminate_done(c, call); break;
    }
    mql_call_free(call);
}

/* ------------------------------------------------------------ the thread */

static void begin_session(mql_client *c) {
    if (c->type == MQL_CONSUMER) session_route_start(c);
    else telemetry_open(c);
}

static void *thread_main(void *arg) {
    mql_client *c = arg;
    pthread_mutex_lock(&c->mu);
    begin_session(c);
    for (;;) {
        int64_t now = mql_now_ms();
        int64_t wake = run_timers(c, now);
        gpr_timespec deadline;
        grpc_event ev;
        if (c->stopping && !c->calls) break;
        if (wake < now) wake = now;
        deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_millis(wake - now, GPR_TIMESPAN));
        pthread_mutex_unlock(&c->mu);
        ev = grpc_completion_queue_next(c->cq, deadline, NULL);
        pthread_mutex_lock(&c->mu);
        if (ev.type == GRPC_OP_COMPLETE) mql_call_complete(ev.tag, ev.success);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* -------------------------------------------------------------- lifecycle */

static char *dup_or_empty(const char *s) {
    return mql_strdup(s ? s : "");
}

static int parse_endpoint(mql_client *c, const char *endpoint, char *err, size_t errlen) {
    const char *colon = strrchr(endpoint, ':');
    char *end;
    long port;
    if (!colon || colon == endpoint) {
        snprintf(err, errlen, "endpoints: expected host:port, got '%s'", endpoint);
        return -1;
    }
    port = strtol(colon + 1, &end, 10);
    if (*end || port <= 0 || port > 65535) {
        snprintf(err, errlen, "endpoints: bad port in '%s'", endpoint);
        return -1;
    }
    c->host = mql_xmalloc((size_t)(colon - endpoint) + 1);
    memcpy(c->host, endpoint, (size_t)(colon - endpoint));
    c->host[colon - endpoint] = '\0';
    c->port = (int)port;
    return 0;
}

static void base36(uint64_t v, char *out) {
    char tmp[16];
    int n = 0, i;
    do {
        tmp[n++] = "0123456789abcdefghijklmnopqrstuvwxyz"[v % 36];
        v /= 36;
    } while (v && n < 15);
    for (i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    out[n] = '\0';
}

static void client_free_fields(mql_client *c) {
    size_t i;
    free(c->endpoint);
    free(c->host);
    free(c->namespace_);
    free(c->access_key);
    free(c->secret_key);
    free(c->security_token);
    free(c->group);
    free(c->topic);
    free(c->filter);
    for (i = 0; i < c->ntopics; i++) free(c->topics[i]);
    free(c->topics);
    free(c->broker_name);
}

static void copy_config(mql_client *c, const mql_config *cfg) {
    size_t i;
    c->type = cfg->type;
    c->endpoint = dup_or_empty(cfg->endpoint);
    c->namespace_ = dup_or_empty(cfg->namespace_);
    c->access_key = cfg->access_key ? mql_strdup(cfg->access_key) : NULL;
    c->secret_key = cfg->secret_key ? mql_strdup(cfg->secret_key) : NULL;
    c->security_token = cfg->security_token ? mql_strdup(cfg->security_token) : NULL;
    c->request_timeout_ms = cfg->request_timeout_ms > 0 ? cfg->request_timeout_ms : 3000;
    c->group = dup_or_empty(cfg->group);
    c->topic = dup_or_empty(cfg->topic);
    c->filter = mql_strdup(cfg->filter && *cfg->filter ? cfg->filter : "*");
    c->filter_sql = cfg->filter_sql;
    c->invisible_ms = cfg->invisible_ms;
    c->renew = cfg->renew;
    c->renew_every_ms = cfg->renew_every_ms > 0 ? cfg->renew_every_ms : cfg->invisible_ms / 3;
    c->max_renewals = cfg->max_renewals;
    c->max_lease_ms = cfg->max_lease_ms;
    c->on_budget = cfg->on_budget ? cfg->on_budget : MQL_BUDGET_EXPIRE;
    c->budget_nack_delay_ms = cfg->budget_nack_delay_ms;
    c->ntopics = cfg->ntopics;
    c->topics = mql_xcalloc(cfg->ntopics, sizeof(char *));
    for (i = 0; i < cfg->ntopics; i++) c->topics[i] = mql_strdup(cfg->topics[i]);
}

mql_client *mql_client_new(const mql_config *cfg, uint64_t *start_op, char *err, size_t errlen) {
    mql_client *c = mql_xcalloc(1, sizeof(*c));
    sigset_t all, old;
    char stamp[16];
    uint32_t salt = 0;

    copy_config(c, cfg);
    if (parse_endpoint(c, c->endpoint, err, errlen) < 0) {
        client_free_fields(c);
        free(c);
        return NULL;
    }
    if (mql_events_init(&c->events) < 0) {
        snprintf(err, errlen, "cannot create an eventfd");
        client_free_fields(c);
        free(c);
        return NULL;
    }
    if (gethostname(c->hostname, sizeof(c->hostname) - 1) < 0) strcpy(c->hostname, "localhost");
    if (getrandom(c->id_node, sizeof(c->id_node), 0) < 0) memset(c->id_node, 7, 6);
    if (getrandom(&salt, sizeof(salt), 0) < 0) salt = (uint32_t)getpid();
    if (getrandom(&c->rand_state, sizeof(c->rand_state), 0) < 0 || !c->rand_state)
        c->rand_state = 0x2545F4914F6CDD1DULL;
    base36((uint64_t)mql_wall_ms(), stamp);
    snprintf(c->client_id, sizeof(c->client_id), "%s@%d@%u@%s", c->hostname, (int)getpid(),
             salt % 100000, stamp);
    c->id.client_id = c->client_id;
    c->id.namespace_ = c->namespace_;
    c->id.access_key = c->access_key;
    c->id.secret_key = c->secret_key;
    c->id.security_token = c->security_token;
    pthread_mutex_init(&c->mu, NULL);
    mql_lease_table_init(&c->leases);
    c->state = MQL_CLIENT_STARTING;
    c->start_op = *start_op = ++c->next_op;

    /* grpc's own threads, and ours, inherit this mask: signals belong to the host. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    grpc_init();
    c->cq = grpc_completion_queue_create_for_next(NULL);
    c->access = channel_new(c->endpoint);
    c->broker = c->access;
    c->thread_started = pthread_create(&c->thread, NULL, thread_main, c) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!c->thread_started) {
        snprintf(err, errlen, "cannot start the client thread");
        mql_client_free(c);
        return NULL;
    }
    return c;
}

void mql_client_free(mql_client *c) {
    mql_call *call;
    release *rel, *next;
    grpc_event ev;
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    for (call = c->calls; call; call = call->next) mql_call_cancel(call);
    pthread_mutex_unlock(&c->mu);
    if (c->thread_started) pthread_join(c->thread, NULL);
    for (rel = c->deferred; rel; rel = next) {
        next = rel->next;
        release_free(rel);
    }
    if (c->broker && c->broker != c->access) grpc_channel_destroy(c->broker);
    if (c->access) grpc_channel_destroy(c->access);
    if (c->cq) {
        grpc_completion_queue_shutdown(c->cq);
        do {
            ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        } while (ev.type != GRPC_QUEUE_SHUTDOWN);
        grpc_completion_queue_destroy(c->cq);
        grpc_shutdown();
    }
    mql_lease_table_free(&c->leases);
    mql_events_destroy(&c->events);
    pthread_mutex_destroy(&c->mu);
    client_free_fields(c);
    free(c);
}

int mql_client_fd(const mql_client *c) {
    return c->events.fd;
}

mql_event *mql_client_take_events(mql_client *c) {
    return mql_events_take(&c->events);
}

const char *mql_client_id(const mql_client *c) {
    return c->client_id;
}

int mql_client_lease_info(mql_client *c, uint64_t lease_id, mql_lease_info *out) {
    mql_lease *l;
    int found = 0;
    pthread_mutex_lock(&c->mu);
    l = mql_lease_find(&c->leases, lease_id);
    if (l) {
        int64_t now = mql_now_ms();
        found = 1;
        out->state = l->state;
        out->remaining_ms = l->deadline_ms - now;
        out->renewals = l->renewals;
        out->held_ms = now - l->acquired_ms;
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

void mql_client_metrics(mql_client *c, mql_metrics *out, size_t *inflight) {
    pthread_mutex_lock(&c->mu);
    *out = c->metrics;
    *inflight = c->leases.count;
    pthread_mutex_unlock(&c->mu);
}

static void collect_held(mql_lease *l, void *ud) {
    struct { uint64_t *ids; size_t n; } *acc = ud;
    if (l->pending == MQL_PENDING_NONE) acc->ids[acc->n++] = l->id;
}

uint64_t mql_client_release_all(mql_client *c, int64_t delay_ms) {
    struct { uint64_t *ids; size_t n; } acc;
    uint64_t op = 0;
    size_t i;
    pthread_mutex_lock(&c->mu);
    acc.ids = mql_xcalloc(c->leases.count, sizeof(uint64_t));
    acc.n = 0;
    mql_lease_each(&c->leases, collect_held, &acc);
    /* one nack per lease: the proxy has no batch ChangeInvisibleDuration */
    for (i = 0; i < acc.n; i++) op = release_start(c, &acc.ids[i], 1, 0, delay_ms);
    free(acc.ids);
    pthread_mutex_unlock(&c->mu);
    return op;
}

int mql_client_wait_released(mql_client *c, int64_t timeout_ms) {
    int64_t deadline = mql_now_ms() + timeout_ms;
    size_t left;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        left = c->leases.count;
        pthread_mutex_unlock(&c->mu);
        if (left == 0 || mql_now_ms() >= deadline) return (int)left;
        usleep(20000);
    }
}

void mql_client_cancel_receives(mql_client *c) {
    mql_call *call;
    pthread_mutex_lock(&c->mu);
    for (call = c->calls; call; call = call->next)
        if (call->kind == K_RECEIVE) mql_call_cancel(call);
    pthread_mutex_unlock(&c->mu);
}

