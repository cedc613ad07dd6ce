/* mql_redis.c -- a Redis client on two threads of its own (see mql_redis.h).
 *
 * The command thread takes commands from a FIFO in order, one at a time, on
 * its own link: simple, ordered, and never in the way of the gRPC thread or
 * the host. The keepalive thread renews the registered locks on a second
 * link, earliest deadline first, so no queue of commands and no slow command
 * can hold a renewal back past a lock's TTL. A broken connection is dropped
 * and re-made by the next command; a command is never sent twice, because a
 * reply lost after the server ran it (an INCR, say) must not run it again.
 * Every wait is on the monotonic clock.
 */
#include "mql_redis.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mql.h"
#include "mql_redis_link.h"

#define RENEW_SCRIPT                                                         \
    "if redis.call('get', KEYS[1]) == ARGV[1] then "                        \
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"

typedef struct redis_cmd {
    struct redis_cmd *next;
    uint64_t op;
    int argc;
    char **argv;
    size_t *lens;
    char *script;            /* non-NULL: an EVALSHA whose argv[1] is the SHA1 */
} redis_cmd;

enum { KA_ACTIVE, KA_LOST, KA_SPENT };

typedef struct keepalive {
    struct keepalive *next;
    uint64_t id;
    char *key, *owner;
    int64_t ttl_ms, every_ms;
    int64_t next_at;         /* monotonic ms of the next renewal */
    int64_t until;           /* stop renewing after this */
    int64_t last_ok;         /* the key cannot outlive last_ok + ttl */
    int state;               /* KA_*: only KA_ACTIVE ones are renewed */
    int busy;                /* being renewed with the lock dropped */
    int cancelled;           /* stopped while busy: freed when the renewal returns */
} keepalive;

struct mql_redis {
    pthread_t cmd_thread, ka_thread;
    int cmd_started, ka_started;
    pthread_mutex_t mu;
    pthread_cond_t cmd_cond, ka_cond;   /* both on CLOCK_MONOTONIC */
    int stopping;
    redis_cmd *head, *tail;
    keepalive *alive;        /* stays listed until keepalive_stop */
    uint64_t next_op;
    mql_events events;
    mql_redis_link *cmd_link;   /* the command thread's own */
    mql_redis_link *ka_link;    /* the keepalive thread's own */
    char renew_sha[41];
};

/* ------------------------------------------------------------ helpers */

static void sha1_hex(const char *s, char out[41]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0, i;
    static const char digits[] = "0123456789abcdef";
    EVP_Digest(s, strlen(s), md, &n, EVP_sha1(), NULL);
    for (i = 0; i < n && i < 20; i++) {
        out[2 * i] = digits[md[i] >> 4];
        out[2 * i + 1] = digits[md[i] & 15];
    }
    out[40] = '\0';
}

void mql_reply_copy(mql_reply *out, const struct redisReply *in) {
    size_t i;
    memset(out, 0, sizeof(*out));
    switch (in->type) {
    case REDIS_REPLY_STRING: out->type = MQL_REPLY_STRING; break;
    case REDIS_REPLY_STATUS: out->type = MQL_REPLY_STATUS; break;
    case REDIS_REPLY_ERROR: out->type = MQL_REPLY_ERROR; break;
    case REDIS_REPLY_INTEGER: out->type = MQL_REPLY_INTEGER; break;
    case REDIS_REPLY_ARRAY: out->type = MQL_REPLY_ARRAY; break;
    default: out->type = MQL_REPLY_NIL; break;
    }
    out->integer = in->integer;
    if (in->str) {
        out->len = in->len;
        out->str = mql_xmalloc(in->len + 1);
        memcpy(out->str, in->str, in->len);
        out->str[in->len] = '\0';
    }
    if (in->type == REDIS_REPLY_ARRAY && in->elements) {
        out->nelements = in->elements;
        out->elements = mql_xcalloc(in->elements, sizeof(*out->elements));
        for (i = 0; i < in->elements; i++) mql_reply_copy(&out->elements[i], in->element[i]);
    }
}

static void cond_init_monotonic(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

/* Waits on cond until when (mql_now_ms time), a signal, or forever (INT64_MAX). */
static void wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t when) {
    struct timespec ts;
    if (when == INT64_MAX) {
        pthread_cond_wait(cond, mu);
        return;
    }
    if (when <= mql_now_ms()) return;
    ts.tv_sec = (time_t)(when / 1000);
    ts.tv_nsec = (long)(when % 1000) * 1000000L;
    pthread_cond_timedwait(cond, mu, &ts);
}

/* The argv index of the key that picks a Cluster slot (0: none). */
static int key_index_of(int argc, char **argv, const char *script) {
    if (script) return argc > 3 && atoi(argv[2]) > 0 ? 3 : 0;
    return argc > 1 ? 1 : 0;
}

/* Runs argv; on NOSCRIPT re-runs it as EVAL with the script. NULL + res on failure. */
static redisReply *run(mql_redis_link *link, int argc, char **argv, size_t *lens,
                       const char *script, mql_result *res) {
    int key = key_index_of(argc, argv, script);
    redisReply *reply = mql_redis_link_run(link, argc, (const char **)argv, lens, key, res);
    if (reply && script && reply->type == REDIS_REPLY_ERROR &&
        strncmp(reply->str, "NOSCRIPT", 8) == 0) {
        char *sha = argv[1];
        size_t sha_len = lens[1];
        freeReplyObject(reply);
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = (char *)script;
        lens[1] = strlen(script);
        reply = mql_redis_link_run(link, argc, (const char **)argv, lens, key, res);
        argv[0] = "EVALSHA";
        lens[0] = 7;
        argv[1] = sha;
        lens[1] = sha_len;
    }
    return reply;
}

/* ------------------------------------------------------------ commands */

static void cmd_free(redis_cmd *cmd) {
    int i;
    for (i = 0; i < cmd->argc; i++)
        if (!(cmd->script && i == 0)) free(cmd->argv[i]);   /* argv[0] "EVALSHA" is static */
    free(cmd->argv);
    free(cmd->lens);
    free(cmd->script);
    free(cmd);
}

static void exec_cmd(mql_redis *r, redis_cmd *cmd) {
    mql_event *ev = mql_event_new(MQL_EV_OP, cmd->op);
    redisReply *reply = run(r->cmd_link, cmd->argc, cmd->argv, cmd->lens, cmd->script,
                            &ev->result);
    if (reply) {
        ev->reply = mql_xcalloc(1, sizeof(*ev->reply));
        mql_reply_copy(ev->reply, reply);
        freeReplyObject(reply);
    }
    mql_events_push(&r->events, ev);
}

static void *cmd_thread_main(void *arg) {
    mql_redis *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        redis_cmd *cmd = r->head;
        if (!cmd) {
            wait_until(&r->cmd_cond, &r->mu, INT64_MAX);
            continue;
        }
        r->head = cmd->next;
        if (!r->head) r->tail = NULL;
        pthread_mutex_unlock(&r->mu);
        exec_cmd(r, cmd);
        cmd_free(cmd);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ------------------------------------------------------------ keepalives */

static void keepalive_free(keepalive *k) {
    free(k->key);
    free(k->owner);
    free(k);
}

enum { RENEW_KEPT, RENEW_RETRY, RENEW_LOST };

/* What a renewal's reply proves. The script answers 1 (renewed) or 0 (the key
 * is gone or another owner's): only that 0 proves the lock lost. An error
 * reply proves nothing about the key: BUSY (a script runs past
 * busy-reply-threshold), LOADING (a restart reads its dataset), MASTERDOWN,
 * CLUSTERDOWN or a READONLY after a failover all leave a key that may still be
 * ours and still counting down its TTL, so they are retried like a lost
 * connection while that TTL allows. */
static int renewal_outcome(const redisReply *reply) {
    if (reply->type != REDIS_REPLY_INTEGER) return RENEW_RETRY;
    return reply->integer == 1 ? RENEW_KEPT : reply->integer == 0 ? RENEW_LOST : RENEW_RETRY;
}

/* One renewal over the keepalive link, with the mutex dropped. */
static int renew_lock(mql_redis *r, const char *key, const char *owner, int64_t ttl_ms) {
    char ttl[24];
    char *argv[6];
    size_t lens[6];
    mql_result res;
    redisReply *reply;
    int outcome;
    snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_ms);
    argv[0] = "EVALSHA";
    argv[1] = r->renew_sha;
    argv[2] = "1";
    argv[3] = (char *)key;
    argv[4] = (char *)owner;
    argv[5] = ttl;
    for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
    reply = run(r->ka_link, 6, argv, lens, RENEW_SCRIPT, &res);
    if (!reply) return RENEW_RETRY;
    outcome = renewal_outcome(reply);
    freeReplyObject(reply);
    return outcome;
}

static void post_lock_lost(mql_redis *r, uint64_t id) {
    mql_event *ev = mql_event_new(MQL_EV_LOCK_LOST, 0);
    ev->keepalive_id = id;
    mql_events_push(&r->events, ev);
}

/* Applies a renewal's outcome (mutex held); started is when it was sent. */
static void apply_renewal(mql_redis *r, keepalive *k, int outcome, int64_t started) {
    int64_t now = mql_now_ms();
    if (outcome == RENEW_KEPT) {
        k->last_ok = started;    /* the new TTL counts from no later than the send */
        k->next_at = started + k->every_ms;
        return;
    }
    if (outcome == RENEW_RETRY && now - k->last_ok < k->ttl_ms) {
        /* unreachable or refused: try again soon, while the key may still be ours */
        k->next_at = now + (k->every_ms < 500 ? k->every_ms : 500);
        return;
    }
    k->state = KA_LOST;
    if (!k->cancelled) post_lock_lost(r, k->id);
}

/* The active, idle keepalive with the earliest deadline (mutex held). */
static keepalive *earliest(const mql_redis *r) {
    keepalive *k, *best = NULL;
    for (k = r->alive; k; k = k->next)
        if (k->state == KA_ACTIVE && !k->busy && (!best || k->next_at < best->next_at)) best = k;
    return best;
}

static void unlink_keepalive(mql_redis *r, keepalive *k) {
    keepalive **pp;
    for (pp = &r->alive; *pp != k; pp = &(*pp)->next) {
    }
    *pp = k->next;
}

static void *ka_thread_main(void *arg) {
    mql_redis *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        keepalive *k = earliest(r);
        int64_t now = mql_now_ms();
        int outcome;
        if (!k || k->next_at > now) {
            wait_until(&r->ka_cond, &r->mu, k ? k->next_at : INT64_MAX);
            continue;
        }
        if (now >= k->until) {   /* its budget is spent: let it expire */
            k->state = KA_SPENT;
            continue;
        }
        k->busy = 1;
        pthread_mutex_unlock(&r->mu);
        outcome = renew_lock(r, k->key, k->owner, k->ttl_ms);
        pthread_mutex_lock(&r->mu);
        k->busy = 0;
        apply_renewal(r, k, outcome, now);
        if (k->cancelled) {
            unlink_keepalive(r, k);
            keepalive_free(k);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ------------------------------------------------------------ public */

static int start_thread(pthread_t *t, void *(*fn)(void *), mql_redis *r) {
    return mql_thread_start(t, fn, r) == 0;
}

mql_redis *mql_redis_new(const mql_redis_config *cfg, char *err, size_t errlen) {
    mql_redis *r = mql_xcalloc(1, sizeof(*r));
    sha1_hex(RENEW_SCRIPT, r->renew_sha);
    if (mql_events_init(&r->events) < 0) {
        snprintf(err, errlen, "cannot create an eventfd");
        free(r);
        return NULL;
    }
    r->cmd_link = mql_redis_link_new(cfg);
    r->ka_link = mql_redis_link_new(cfg);
    pthread_mutex_init(&r->mu, NULL);
    cond_init_monotonic(&r->cmd_cond);
    cond_init_monotonic(&r->ka_cond);
    r->cmd_started = start_thread(&r->cmd_thread, cmd_thread_main, r);
    r->ka_started = r->cmd_started && start_thread(&r->ka_thread, ka_thread_main, r);
    if (!r->ka_started) {
        snprintf(err, errlen, "cannot start the redis threads");
        mql_redis_free(r);
        return NULL;
    }
    return r;
}

void mql_redis_free(mql_redis *r) {
    redis_cmd *cmd, *next;
    keepalive *k, *knext;
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    pthread_cond_signal(&r->cmd_cond);
    pthread_cond_signal(&r->ka_cond);
    pthread_mutex_unlock(&r->mu);
    if (r->cmd_started) pthread_join(r->cmd_thread, NULL);
    if (r->ka_started) pthread_join(r->ka_thread, NULL);
    for (cmd = r->head; cmd; cmd = next) {
        next = cmd->next;
        cmd_free(cmd);
    }
    for (k = r->alive; k; k = knext) {
        knext = k->next;
        keepalive_free(k);
    }
    mql_redis_link_free(r->cmd_link);
    mql_redis_link_free(r->ka_link);
    mql_events_destroy(&r->events);
    pthread_cond_destroy(&r->cmd_cond);
    pthread_cond_destroy(&r->ka_cond);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int mql_redis_fd(const mql_redis *r) {
    return r->events.fd;
}

mql_event *mql_redis_take_events(mql_redis *r) {
    return mql_events_take(&r->events);
}

void mql_redis_requeue_events(mql_redis *r, mql_event *list) {
    mql_events_requeue(&r->events, list);
}

static uint64_t enqueue(mql_redis *r, redis_cmd *cmd) {
    uint64_t op;
    pthread_mutex_lock(&r->mu);
    op = cmd->op = ++r->next_op;
    if (r->tail) r->tail->next = cmd;
    else r->head = cmd;
    r->tail = cmd;
    pthread_cond_signal(&r->cmd_cond);
    pthread_mutex_unlock(&r->mu);
    return op;
}

static void copy_arg(redis_cmd *cmd, int i, const char *s, size_t len) {
    cmd->argv[i] = mql_xmalloc(len + 1);
    memcpy(cmd->argv[i], s, len);
    cmd->argv[i][len] = '\0';
    cmd->lens[i] = len;
}

uint64_t mql_redis_command(mql_redis *r, int argc, const char **argv, const size_t *lens) {
    redis_cmd *cmd = mql_xcalloc(1, sizeof(*cmd));
    int i;
    cmd->argc = argc;
    cmd->argv = mql_xcalloc((size_t)argc, sizeof(char *));
    cmd->lens = mql_xcalloc((size_t)argc, sizeof(size_t));
    for (i = 0; i < argc; i++) copy_arg(cmd, i, argv[i], lens[i]);
    return enqueue(r, cmd);
}

uint64_t mql_redis_eval(mql_redis *r, const char *script, int numkeys, int argc,
                        const char **argv, const size_t *lens) {
    redis_cmd *cmd = mql_xcalloc(1, sizeof(*cmd));
    char sha[41], nk[16];
    int i;
    sha1_hex(script, sha);
    snprintf(nk, sizeof(nk), "%d", numkeys);
    cmd->script = mql_strdup(script);
    cmd->argc = argc + 3;
    cmd->argv = mql_xcalloc((size_t)cmd->argc, sizeof(char *));
    cmd->lens = mql_xcalloc((size_t)cmd->argc, sizeof(size_t));
    cmd->argv[0] = "EVALSHA";
    cmd->lens[0] = 7;
    copy_arg(cmd, 1, sha, 40);
    copy_arg(cmd, 2, nk, strlen(nk));
    for (i = 0; i < argc; i++) copy_arg(cmd, i + 3, argv[i], lens[i]);
    return enqueue(r, cmd);
}

uint64_t mql_redis_keepalive(mql_redis *r, const char *key, const char *owner, int64_t ttl_ms,
                             int64_t every_ms, int64_t max_ms, int64_t since_ms) {
    keepalive *k = mql_xcalloc(1, sizeof(*k));
    int64_t now = mql_now_ms();
    /* the key's TTL started when its acquire was sent, however late this call
     * comes; a time from the future is no acquire of ours, so it counts as now */
    int64_t since = since_ms > 0 && since_ms < now ? since_ms : now;
    uint64_t id;
    k->key = mql_strdup(key);
    k->owner = mql_strdup(owner);
    k->ttl_ms = ttl_ms;
    k->every_ms = every_ms > 0 ? every_ms : ttl_ms / 3;
    k->next_at = since + k->every_ms;   /* already due when registered late */
    k->until = max_ms > 0 ? since + max_ms : INT64_MAX;
    k->last_ok = since;
    pthread_mutex_lock(&r->mu);
    id = k->id = ++r->next_op;
    k->next = r->alive;
    r->alive = k;
    pthread_cond_signal(&r->ka_cond);
    pthread_mutex_unlock(&r->mu);
    return id;
}

int mql_redis_keepalive_stop(mql_redis *r, uint64_t id) {
    keepalive *k;
    int lost = 0;
    pthread_mutex_lock(&r->mu);
    for (k = r->alive; k && k->id != id; k = k->next) {
    }
    if (k) {
        /* lost: a renewal said so, or the TTL ran out since the last good one */
        lost = k->state == KA_LOST || mql_now_ms() - k->last_ok >= k->ttl_ms;
        if (k->busy) {
            k->cancelled = 1;   /* the thread frees it when the renewal returns */
        } else {
            unlink_keepalive(r, k);
            keepalive_free(k);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return lost;
}
