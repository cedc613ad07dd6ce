/* mql_client.c -- one client's hub: its thread, its calls, its life.
 *
 * A client (consumer or producer) owns one completion queue and one thread
 * that waits on it. Each call carries the ops of the stage that started it
 * (mql_call_ops, in mql_client_private.h): the thread runs them when a reply
 * or the end of the call arrives, and runs the stages' timers. Nothing here
 * knows what a call is for. The host starts
 * operations from its own thread; each returns an op id at once and finishes
 * later as an MQL_EV_OP event.
 *
 * Every function here runs with c->mu held unless it says otherwise.
 */
#include "mql_client_private.h"
#include "mql_body.h"

#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define MAX_IDLE_WAIT_MS 200

/* ---------------------------------------------------------------- helpers */

uint64_t mql_client_random(mql_client *c) {
    /* xorshift64*: jitter only, no need for quality */
    c->rand_state ^= c->rand_state >> 12;
    c->rand_state ^= c->rand_state << 25;
    c->rand_state ^= c->rand_state >> 27;
    return c->rand_state * 2685821657736338717ULL;
}

void mql_post_op(mql_client *c, uint64_t op, const mql_result *r) {
    mql_event *ev = mql_event_new(MQL_EV_OP, op);
    ev->result = *r;
    mql_events_push(&c->events, ev);
}

uint64_t mql_post_refusal(mql_client *c, const char *code, const char *msg) {
    mql_result r;
    uint64_t op = ++c->next_op;
    mql_result_fail(&r, code, "%s", msg);
    mql_post_op(c, op, &r);
    return op;
}

void mql_post_lease(mql_client *c, const mql_lease *l, mql_lease_state state) {
    mql_event *ev = mql_event_new(MQL_EV_LEASE, 0);
    ev->lease_id = l->id;
    ev->lease_state = state;
    ev->lease_renewals = l->renewals;
    mql_events_push(&c->events, ev);
}

int mql_client_refuses(mql_client *c, mql_client_type type, const char *what, uint64_t *op) {
    char msg[MQL_ERRLEN];
    if (c->stopping) {
        snprintf(msg, sizeof(msg), "%s: the client is closed", what);
        *op = mql_post_refusal(c, "CLOSED", msg);
    } else if (c->state != MQL_CLIENT_READY || (type && c->type != type)) {
        snprintf(msg, sizeof(msg), "%s: the %s is not ready", what,
                 c->type == MQL_CONSUMER ? "consumer" : "producer");
        *op = mql_post_refusal(c, "NOT_READY", msg);
    } else {
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ call plumbing */

static void on_call_done(mql_call *call);
static void on_call_message(mql_call *call, grpc_byte_buffer *reply);

mql_call *mql_client_call(mql_client *c, grpc_channel *ch, const char *method,
                          int64_t timeout_ms, const mql_call_ops *ops, uint64_t op, void *ctx) {
    mql_call *call = mql_call_new(ch, c->cq, method, timeout_ms, &c->id);
    call->owner = c;
    call->ops = ops;
    call->op = op;
    call->ctx = ctx;
    call->on_done = on_call_done;
    call->on_message = on_call_message;
    call->next = c->calls;
    if (c->calls) c->calls->prev = call;
    c->calls = call;
    return call;
}

void mql_client_unlink(mql_client *c, mql_call *call) {
    if (call->prev) call->prev->next = call->next;
    else c->calls = call->next;
    if (call->next) call->next->prev = call->prev;
    call->prev = call->next = NULL;
}

int mql_client_unary(mql_client *c, mql_call *call, const ProtobufCMessage *req) {
    if (!c->stopping && mql_call_start_unary(call, req) == 0) return 0;
    mql_client_unlink(c, call);
    mql_call_free(call);
    return -1;
}

/* ------------------------------------------------------------ the ops */

static void on_call_message(mql_call *call, grpc_byte_buffer *reply) {
    if (call->ops->on_message) call->ops->on_message(call->owner, call, reply);
}

static void on_call_done(mql_call *call) {
    mql_client *c = call->owner;
    mql_client_unlink(c, call);
    call->ops->on_done(c, call);
    mql_call_free(call);
}

/* ------------------------------------------------------------ the thread */

static int64_t run_timers(mql_client *c, int64_t now) {
    int64_t wake = now + MAX_IDLE_WAIT_MS;
    if (c->stopping) return now + 50;
    wake = mql_session_timers(c, now, wake);
    return mql_renew_timers(c, now, wake);
}

static void *thread_main(void *arg) {
    mql_client *c = arg;
    pthread_mutex_lock(&c->mu);
    mql_session_begin(c);
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

/* Secrets are wiped before their memory goes back to the allocator. */
static void free_secret(char *s) {
    if (!s) return;
    explicit_bzero(s, strlen(s));
    free(s);
}

static void client_free_fields(mql_client *c) {
    mql_consumer_part *cs = &c->consumer;
    mql_producer_part *pr = &c->producer;
    size_t i;
    mql_call_identity_clear(&c->id);
    free(c->endpoint_list);
    free(c->endpoint);
    free(c->host);
    free(c->namespace_);
    free(c->access_key);
    free_secret(c->secret_key);
    free_secret(c->security_token);
    free(c->tls_ca_pem);
    free(c->tls_cert_pem);
    free_secret(c->tls_key_pem);
    free(c->tls_server_name);
    free(cs->group);
    free(cs->topic);
    free(cs->filter);
    free(cs->broker_name);
    mql_lease_table_free(&cs->leases);
    for (i = 0; i < pr->ntopics; i++) free(pr->topics[i]);
    free(pr->topics);
}

static void copy_consumer_config(mql_consumer_part *cs, const mql_config *cfg) {
    cs->group = dup_or_empty(cfg->group);
    cs->topic = dup_or_empty(cfg->topic);
    cs->filter = mql_strdup(cfg->filter && *cfg->filter ? cfg->filter : "*");
    cs->filter_sql = cfg->filter_sql;
    cs->invisible_ms = cfg->invisible_ms;
    cs->renew = cfg->renew;
    cs->renew_every_fixed = cfg->renew_every_ms > 0;
    cs->invisible_auto = cfg->invisible_auto;
    if (cs->invisible_auto) {
        mql_auto_init(&cs->auto_, cfg->invisible_ms, cfg->auto_min_ms, cfg->auto_max_ms,
                      cfg->auto_margin_pct);
        cs->invisible_ms = cs->auto_.value_ms;
    }
    cs->renew_every_ms = cs->renew_every_fixed ? cfg->renew_every_ms : cs->invisible_ms / 3;
    mql_pace_init(&cs->pace, cs->invisible_ms, cs->renew_every_ms);
    cs->max_renewals = cfg->max_renewals;
    cs->max_lease_ms = cfg->max_lease_ms;
    cs->on_budget = cfg->on_budget ? cfg->on_budget : MQL_BUDGET_EXPIRE;
    cs->release_delay_ms = cfg->release_delay_ms;
    cs->on_corrupt_dlq = cfg->on_corrupt_dlq;
    cs->corrupt_delay_ms = cfg->corrupt_delay_ms;
    cs->max_body = cfg->max_body > 0 ? (size_t)cfg->max_body : MQL_MAX_BODY_DEFAULT;
    mql_lease_table_init(&cs->leases);
}

static void copy_producer_config(mql_producer_part *pr, const mql_config *cfg) {
    size_t i;
    pr->ntopics = cfg->ntopics;
    pr->topics = mql_xcalloc(cfg->ntopics, sizeof(char *));
    for (i = 0; i < cfg->ntopics; i++) pr->topics[i] = mql_strdup(cfg->topics[i]);
    if (getrandom(pr->id_node, sizeof(pr->id_node), 0) < 0) memset(pr->id_node, 7, 6);
}

static void copy_config(mql_client *c, const mql_config *cfg) {
    c->type = cfg->type;
    c->endpoint_list = dup_or_empty(cfg->endpoint);
    c->namespace_ = dup_or_empty(cfg->namespace_);
    c->access_key = cfg->access_key ? mql_strdup(cfg->access_key) : NULL;
    c->secret_key = cfg->secret_key ? mql_strdup(cfg->secret_key) : NULL;
    c->security_token = cfg->security_token ? mql_strdup(cfg->security_token) : NULL;
    c->tls = cfg->tls;
    c->tls_insecure = cfg->tls_insecure;
    c->tls_ca_pem = cfg->tls_ca_pem ? mql_strdup(cfg->tls_ca_pem) : NULL;
    c->tls_cert_pem = cfg->tls_cert_pem ? mql_strdup(cfg->tls_cert_pem) : NULL;
    c->tls_key_pem = cfg->tls_key_pem ? mql_strdup(cfg->tls_key_pem) : NULL;
    c->tls_server_name = cfg->tls_server_name ? mql_strdup(cfg->tls_server_name) : NULL;
    c->request_timeout_ms = cfg->request_timeout_ms > 0 ? cfg->request_timeout_ms : 3000;
    copy_consumer_config(&c->consumer, cfg);
    copy_producer_config(&c->producer, cfg);
}

mql_client *mql_client_new(const mql_config *cfg, uint64_t *start_op, char *err, size_t errlen) {
    mql_client *c = mql_xcalloc(1, sizeof(*c));
    sigset_t old;
    char stamp[16];
    uint32_t salt = 0;

    copy_config(c, cfg);
    if (mql_session_endpoints_init(c, err, errlen) < 0) {
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
    if (getrandom(&salt, sizeof(salt), 0) < 0) salt = (uint32_t)getpid();
    if (getrandom(&c->rand_state, sizeof(c->rand_state), 0) < 0 || !c->rand_state)
        c->rand_state = 0x2545F4914F6CDD1DULL;
    c->consumer.pace.salt = mql_client_random(c);
    base36((uint64_t)mql_wall_ms(), stamp);
    snprintf(c->client_id, sizeof(c->client_id), "%s@%d@%u@%s", c->hostname, (int)getpid(),
             salt % 100000, stamp);
    c->id.client_id = c->client_id;
    c->id.namespace_ = c->namespace_;
    c->id.access_key = c->access_key;
    c->id.secret_key = c->secret_key;
    c->id.security_token = c->security_token;
    pthread_mutex_init(&c->mu, NULL);
    c->refs = 1;
    c->state = MQL_CLIENT_STARTING;
    mql_backoff_init(&c->reconnect, MQL_BACKOFF_BASE_MS, MQL_BACKOFF_CAP_MS);
    c->start_op = *start_op = ++c->next_op;

    /* grpc's own threads, and ours, inherit this mask: signals belong to the host. */
    mql_signals_block(&old);
    mql_absl_quiet();
    grpc_init();
    c->cq = grpc_completion_queue_create_for_next(NULL);
    c->access = mql_session_channel_new(c, c->endpoint);
    c->broker = c->access;
    c->thread_started = mql_thread_start(&c->thread, thread_main, c) == 0;
    mql_signals_restore(&old);
    if (!c->thread_started) {
        snprintf(err, errlen, "cannot start the client thread");
        mql_client_free(c);
        return NULL;
    }
    return c;
}

/* Everything that needs the thread or the network ends here, once. */
static void client_stop(mql_client *c) {
    mql_call *call;
    mql_release *rel, *next;
    grpc_event ev;
    pthread_mutex_lock(&c->mu);
    if (c->stopped) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->stopping = 1;
    for (call = c->calls; call; call = call->next) mql_call_cancel(call);
    /* releases held for a reconnect fail CLOSED now: nothing will send them */
    mql_release_run_deferred(c);
    pthread_mutex_unlock(&c->mu);
    if (c->thread_started) pthread_join(c->thread, NULL);
    pthread_mutex_lock(&c->mu);
    for (rel = c->consumer.deferred; rel; rel = next) {
        next = rel->next;
        mql_release_free(rel);
    }
    c->consumer.deferred = NULL;
    if (c->broker && c->broker != c->access) grpc_channel_destroy(c->broker);
    if (c->access) grpc_channel_destroy(c->access);
    c->broker = c->access = NULL;
    if (c->cq) {
        grpc_completion_queue_shutdown(c->cq);
        do {
            ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        } while (ev.type != GRPC_QUEUE_SHUTDOWN);
        grpc_completion_queue_destroy(c->cq);
        c->cq = NULL;
        grpc_shutdown();
    }
    c->stopped = 1;
    pthread_mutex_unlock(&c->mu);
}

void mql_client_ref(mql_client *c) {
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
}

void mql_client_unref(mql_client *c) {
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    client_stop(c);
    mql_events_destroy(&c->events);
    pthread_mutex_destroy(&c->mu);
    client_free_fields(c);
    free(c);
}

void mql_client_free(mql_client *c) {
    if (!c) return;
    client_stop(c);
    mql_client_unref(c);
}

int64_t mql_client_request_timeout_ms(const mql_client *c) {
    return c->request_timeout_ms;
}

int mql_client_fd(const mql_client *c) {
    return c->events.fd;
}

mql_event *mql_client_take_events(mql_client *c) {
    return mql_events_take(&c->events);
}

void mql_client_requeue_events(mql_client *c, mql_event *list) {
    mql_events_requeue(&c->events, list);
}

const char *mql_client_id(const mql_client *c) {
    return c->client_id;
}

int mql_client_lease_info(mql_client *c, uint64_t lease_id, mql_lease_info *out) {
    mql_lease *l;
    int found = 0;
    pthread_mutex_lock(&c->mu);
    l = mql_lease_find(&c->consumer.leases, lease_id);
    if (l) {
        int64_t now = mql_now_ms();
        found = 1;
        out->state = l->state;
        out->remaining_ms = l->deadline_ms - now;
        out->renewals = l->renewals;
        out->held_ms = now - l->acquired_ms;
        out->uncertain = l->uncertain;
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

void mql_client_metrics(mql_client *c, mql_metrics *out, size_t *inflight) {
    pthread_mutex_lock(&c->mu);
    *out = c->metrics;
    out->session_state = c->reconnecting && c->state == MQL_CLIENT_READY
                             ? MQL_CLIENT_RECONNECTING : (int)c->state;
    out->invisible_ms = c->consumer.invisible_ms;
    out->fifo = c->consumer.fifo;
    out->retry = c->consumer.retry;
    *inflight = c->consumer.leases.count;
    pthread_mutex_unlock(&c->mu);
}

