/* mql_client.c -- a client's public API (mql_client.h): its life, its thread,
 * and the door to each stage.
 *
 * A client (consumer or producer) owns one completion queue and one thread
 * that waits on it. The thread starts the session, runs the stages' timers
 * (mql_session_timers, mql_renew_timers) and hands each finished batch to its
 * call, whose ops (given by the stage that started it, mql_base.c) say what
 * it was for. The host starts operations from its own thread; each returns an
 * op id at once and finishes later as an MQL_EV_OP event.
 *
 * This file stands above every stage and is the only one that takes c->mu:
 * each operation of the host takes it, refuses what a closed or unready client
 * cannot do, and hands over to the stage that owns it (receive, release,
 * producer, session). No stage calls back up here (the map is at the top of
 * mql_base.h).
 *
 * The thread holds c->mu while it runs timers and completions, never while
 * it waits; each function of mql_client.h takes it itself where it needs it.
 */
#include "mql_client.h"

#include "mql_base.h"
#include "mql_body.h"
#include "mql_producer.h"
#include "mql_transaction.h"
#include "mql_lite.h"
#include "mql_receive.h"
#include "mql_release.h"
#include "mql_renew.h"
#include "mql_endpoint.h"
#include "mql_session.h"

#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define MAX_IDLE_WAIT_MS 200

/* The guard of every operation the host starts: 1 (and *op set to a refusal)
 * when the client is stopping or not ready, or is not of the given type. */
static int refuses(mql_client *c, mql_client_type type, const char *what, uint64_t *op) {
    char msg[MQL_ERRLEN];
    if (c->stopping) {
        snprintf(msg, sizeof(msg), "%s: the client is closed", what);
        *op = mql_base_post_refusal(c, "CLOSED", msg);
    } else if (c->state != MQL_CLIENT_READY || (type && c->type != type)) {
        snprintf(msg, sizeof(msg), "%s: the %s is not ready", what,
                 c->type == MQL_CONSUMER ? "consumer" : "producer");
        *op = mql_base_post_refusal(c, "NOT_READY", msg);
    } else {
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ the thread */

static int64_t run_timers(mql_client *c, int64_t now) {
    int64_t wake = now + MAX_IDLE_WAIT_MS;
    if (c->stopping) return now + 50;
    wake = mql_session_timers(c, now, wake);
    wake = mql_lite_timers(c, now, wake);
    wake = mql_renew_timers(c, now, wake);
    /* after the renewals: a held receive goes out only once they caught up */
    return mql_receive_timers(c, now, wake);
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
    for (i = 0; i < cs->nbrokers; i++) free(cs->brokers[i]);
    free(cs->brokers);
    mql_lite_free(cs);
    mql_lease_table_free(&cs->leases);
    free(cs->renew_held);
    for (i = 0; i < pr->ntopics; i++) free(pr->topics[i]);
    free(pr->topics);
}

static void copy_consumer_config(mql_consumer_part *cs, const mql_config *cfg) {
    cs->group = dup_or_empty(cfg->group);
    cs->topic = dup_or_empty(cfg->topic);
    cs->filter = mql_strdup(cfg->filter && *cfg->filter ? cfg->filter : "*");
    cs->filter_sql = cfg->filter_sql;
    cs->lite = cfg->lite;
    cs->lite_sync_every_ms = cfg->lite_sync_every_ms > 0 ? cfg->lite_sync_every_ms : 30000;
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
    if (mql_endpoint_list_init(c, err, errlen) < 0) {
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
    c->consumer.pace.salt = mql_base_random(c);
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
    c->access = mql_endpoint_channel_new(c, c->endpoint);
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
    grpc_event ev;
    pthread_mutex_lock(&c->mu);
    if (c->stopped) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->stopping = 1;
    for (call = c->calls; call; call = call->next) mql_call_cancel(call);
    mql_receive_end_waiting(c, "CLOSED", "receive: the client is closed");
    /* releases held for a reconnect fail CLOSED now: nothing will send them */
    mql_release_run_deferred(c);
    pthread_mutex_unlock(&c->mu);
    if (c->thread_started) pthread_join(c->thread, NULL);
    pthread_mutex_lock(&c->mu);
    mql_release_drop_deferred(c);
    if (c->broker != c->access) mql_call_channel_unref(c->broker);
    mql_call_channel_unref(c->access);
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

/* ------------------------------------------------------ the host's operations */

uint64_t mql_client_receive(mql_client *c, int batch, int64_t await_ms, size_t max_bytes) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    if (!refuses(c, MQL_CONSUMER, "receive", &op))
        op = mql_receive_start(c, batch, await_ms, max_bytes);
    pthread_mutex_unlock(&c->mu);
    return op;
}

void mql_client_cancel_receives(mql_client *c) {
    pthread_mutex_lock(&c->mu);
    mql_receive_cancel_all(c);
    pthread_mutex_unlock(&c->mu);
}

uint64_t mql_client_ack(mql_client *c, const uint64_t *lease_ids, size_t n) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    op = mql_release_ack(c, lease_ids, n);
    pthread_mutex_unlock(&c->mu);
    return op;
}

uint64_t mql_client_nack(mql_client *c, uint64_t lease_id, int64_t delay_ms) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    op = mql_release_nack(c, lease_id, delay_ms);
    pthread_mutex_unlock(&c->mu);
    return op;
}

uint64_t mql_client_dead_letter(mql_client *c, uint64_t lease_id, const char *reason) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    op = mql_release_dead_letter(c, lease_id, reason);
    pthread_mutex_unlock(&c->mu);
    return op;
}

int mql_client_let_expire(mql_client *c, uint64_t lease_id) {
    int found;
    pthread_mutex_lock(&c->mu);
    found = mql_release_let_expire(c, lease_id);
    pthread_mutex_unlock(&c->mu);
    return found;
}

void mql_client_event_dropped(mql_client *c, const mql_event *ev) {
    pthread_mutex_lock(&c->mu);
    mql_release_undelivered(c, ev);
    pthread_mutex_unlock(&c->mu);
}

uint64_t mql_client_nack_all(mql_client *c, int64_t delay_ms) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    op = mql_release_nack_all(c, delay_ms);
    pthread_mutex_unlock(&c->mu);
    return op;
}

int mql_client_wait_released(mql_client *c, int64_t timeout_ms) {
    int64_t deadline = mql_now_ms() + timeout_ms;
    size_t left;
    for (;;) {
        int stopped;
        pthread_mutex_lock(&c->mu);
        left = c->consumer.leases.count;
        stopped = c->stopped;
        pthread_mutex_unlock(&c->mu);
        /* a stopped client answers nothing more: no reply will shrink the table */
        if (left == 0 || stopped || mql_now_ms() >= deadline) return (int)left;
        usleep(20000);
    }
}

uint64_t mql_client_send(mql_client *c, const char *topic, const uint8_t *body, size_t len,
                         const mql_send_opts *opts) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    if (!refuses(c, MQL_PRODUCER, "send", &op)) op = mql_producer_send(c, topic, body, len, opts);
    pthread_mutex_unlock(&c->mu);
    return op;
}

uint64_t mql_client_recall(mql_client *c, const char *topic, const char *handle) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    if (!refuses(c, MQL_PRODUCER, "recall", &op)) op = mql_producer_recall(c, topic, handle);
    pthread_mutex_unlock(&c->mu);
    return op;
}

uint64_t mql_client_sync_lite(mql_client *c, int action, const char *const *names, size_t n) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    if (!refuses(c, MQL_CONSUMER, "sync_lite", &op)) {
        if (c->consumer.lite) op = mql_lite_sync(c, action, names, n);
        else op = mql_base_post_refusal(c, "NOT_LITE", "sync_lite: the consumer is not a lite consumer");
    }
    pthread_mutex_unlock(&c->mu);
    return op;
}

uint64_t mql_client_end_transaction(mql_client *c, const char *topic, const char *message_id,
                                    const char *transaction_id, int commit, int from_check,
                                    const char *trace_context) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    if (!refuses(c, MQL_PRODUCER, "end_transaction", &op))
        op = mql_transaction_end(c, topic, message_id, transaction_id, commit, from_check, trace_context);
    pthread_mutex_unlock(&c->mu);
    return op;
}

uint64_t mql_client_route(mql_client *c, const char *topic) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    if (c->stopping) op = mql_base_post_refusal(c, "CLOSED", "route: the client is closed");
    else op = mql_session_route(c, topic);
    pthread_mutex_unlock(&c->mu);
    return op;
}

uint64_t mql_client_terminate(mql_client *c) {
    uint64_t op;
    pthread_mutex_lock(&c->mu);
    if (!refuses(c, 0, "terminate", &op)) op = mql_session_terminate(c);
    pthread_mutex_unlock(&c->mu);
    return op;
}
