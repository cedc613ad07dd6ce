/* mql_redis.c -- a Redis client on two threads of its own (see mql_redis.h).
 *
 * The command thread takes commands from a FIFO in order on its own link,
 * never in the way of the gRPC thread or the host. It takes everything queued
 * (up to PIPELINE_MAX) at once and pipelines it: one write, then the replies
 * read back in order, one round trip for a whole batch -- the host submits the
 * scripts of many messages together (mql_redis_submit), so the exactly-once
 * policy pays one round trip per scheduler turn instead of one per script.
 * Each command still gets its own event, matched by position; a connection
 * that breaks mid-batch fails the command it cut and all after it. The
 * keepalive thread (mql_redis_keepalive.c) renews the registered locks on a
 * second link, so no queue of commands can hold a renewal back past a TTL. A broken connection is dropped
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
#include "mql_redis_private.h"

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
void mql_redis_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t when) {
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
static int key_index_of(int argc, char **argv, int eval) {
    if (eval) return argc > 3 && atoi(argv[2]) > 0 ? 3 : 0;
    return argc > 1 ? 1 : 0;
}

/* ------------------------------------------------------------ commands */

static void script_release(redis_script *s) {
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) free(s);
}

static void cmd_free(redis_cmd *cmd) {
    script_release(cmd->script);
    free(cmd);   /* argv, lens and the arguments are in the same block */
}

static int is_noscript(const redisReply *reply) {
    return reply && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

/* The server lacked a script (a restart, a failover, SCRIPT FLUSH): NOSCRIPT
 * proves its EVALSHA did not run, so those commands run again, together, as
 * EVAL with the script's text. Returns the round trips it took. */
static int rerun_noscript(mql_redis *r, redis_cmd **cmds, int n, redisReply **replies,
                          mql_result *res) {
    mql_redis_argv av[PIPELINE_MAX] = {{0}};
    redisReply *again[PIPELINE_MAX];
    mql_result again_res[PIPELINE_MAX];
    int idx[PIPELINE_MAX], m = 0, i, trips;
    for (i = 0; i < n; i++) {
        redis_cmd *c = cmds[i];
        const char **argv;
        size_t *lens;
        if (!c->script || !is_noscript(replies[i])) continue;
        freeReplyObject(replies[i]);
        replies[i] = NULL;
        /* a copy of the pointers: the command keeps its own argv for cmd_free */
        argv = mql_xcalloc((size_t)c->argc, sizeof(*argv));
        lens = mql_xcalloc((size_t)c->argc, sizeof(*lens));
        memcpy(argv, c->argv, (size_t)c->argc * sizeof(*argv));
        memcpy(lens, c->lens, (size_t)c->argc * sizeof(*lens));
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = c->script->text;
        lens[1] = c->script->len;
        av[m] = (mql_redis_argv){c->argc, argv, lens, key_index_of(c->argc, c->argv, c->script != NULL)};
        idx[m++] = i;
    }
    if (!m) return 0;
    trips = mql_redis_link_run_many(r->cmd_link, m, av, again, again_res);
    for (i = 0; i < m; i++) {
        replies[idx[i]] = again[i];
        res[idx[i]] = again_res[i];
        free((void *)av[i].argv);
        free((void *)av[i].lens);
    }
    return trips;
}

/* Runs a batch on the command link and posts one event per command, in order. */
static void exec_batch(mql_redis *r, redis_cmd **cmds, int n) {
    mql_redis_argv av[PIPELINE_MAX] = {{0}};   /* only n are used; gcc cannot tell */
    redisReply *replies[PIPELINE_MAX];
    mql_result res[PIPELINE_MAX];
    mql_event *chain = NULL;
    int i, trips;
    for (i = 0; i < n; i++)
        av[i] = (mql_redis_argv){cmds[i]->argc, (const char **)cmds[i]->argv, cmds[i]->lens,
                                 key_index_of(cmds[i]->argc, cmds[i]->argv, cmds[i]->script != NULL)};
    trips = mql_redis_link_run_many(r->cmd_link, n, av, replies, res);
    for (i = 0; i < n; i++)
        if (cmds[i]->script && is_noscript(replies[i])) break;
    if (i < n) trips += rerun_noscript(r, cmds, n, replies, res);   /* rare: once per server */
    pthread_mutex_lock(&r->mu);
    r->round_trips += (uint64_t)trips;
    r->commands += (uint64_t)n;
    pthread_mutex_unlock(&r->mu);
    for (i = n - 1; i >= 0; i--) {   /* built backwards, so the chain is in order */
        mql_event *ev = mql_event_new(MQL_EV_OP, cmds[i]->op);
        ev->result = res[i];
        if (replies[i]) {
            ev->reply = mql_xcalloc(1, sizeof(*ev->reply));
            mql_reply_copy(ev->reply, replies[i]);
            freeReplyObject(replies[i]);
        }
        ev->next = chain;
        chain = ev;
    }
    mql_events_push_all(&r->events, chain);   /* one wake-up for the batch */
}

/* Takes up to PIPELINE_MAX queued commands off the FIFO (mutex held). */
static int take_batch(mql_redis *r, redis_cmd **cmds) {
    int n = 0;
    while (r->head && n < PIPELINE_MAX) {
        cmds[n++] = r->head;
        r->head = r->head->next;
    }
    if (!r->head) r->tail = NULL;
    return n;
}

static void *cmd_thread_main(void *arg) {
    mql_redis *r = arg;
    redis_cmd *cmds[PIPELINE_MAX];
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        int n, i;
        if (!r->head) {
            mql_redis_wait_until(&r->cmd_cond, &r->mu, INT64_MAX);
            continue;
        }
        n = take_batch(r, cmds);
        pthread_mutex_unlock(&r->mu);
        exec_batch(r, cmds, n);
        for (i = 0; i < n; i++) cmd_free(cmds[i]);
        pthread_mutex_lock(&r->mu);
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
    r->ka_wake_at = INT64_MIN;   /* until the thread first sleeps: it scans anyway */
    r->cmd_link = mql_redis_link_new(cfg);
    r->ka_link = mql_redis_link_new(cfg);
    pthread_mutex_init(&r->mu, NULL);
    cond_init_monotonic(&r->cmd_cond);
    cond_init_monotonic(&r->ka_cond);
    r->cmd_started = start_thread(&r->cmd_thread, cmd_thread_main, r);
    r->ka_started = r->cmd_started && start_thread(&r->ka_thread, mql_redis_ka_thread_main, r);
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
        mql_redis_keepalive_free(k);
    }
    free(r->ka_index);
    free(r->ka_heap);
    mql_redis_link_free(r->cmd_link);
    mql_redis_link_free(r->ka_link);
    for (int i = 0; i < SHA_CACHE; i++) script_release(r->sha_cache[i]);
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

/* Queues n commands in one step, so the command thread never splits them
 * across round trips it need not; the first op id (the others follow it). */
uint64_t mql_redis_submit(mql_redis *r, mql_redis_cmd **cmds, int n) {
    uint64_t first;
    int i;
    pthread_mutex_lock(&r->mu);
    first = r->next_op + 1;
    for (i = 0; i < n; i++) {
        cmds[i]->op = ++r->next_op;
        cmds[i]->next = NULL;
        if (r->tail) r->tail->next = cmds[i];
        else r->head = cmds[i];
        r->tail = cmds[i];
    }
    pthread_cond_signal(&r->cmd_cond);
    pthread_mutex_unlock(&r->mu);
    return first;
}

/* A command of argc arguments with room for `bytes` of their text, in one
 * block; *text is where that room starts. */
static redis_cmd *cmd_alloc(int argc, size_t bytes, char **text) {
    size_t head = sizeof(redis_cmd) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    redis_cmd *cmd = mql_xcalloc(1, head + bytes);
    cmd->argc = argc;
    cmd->argv = (char **)(cmd + 1);
    cmd->lens = (size_t *)(cmd->argv + argc);
    *text = (char *)(cmd->lens + argc);
    return cmd;
}

/* Copies s into the block at p as argument i; returns where the next goes. */
static char *put_arg(redis_cmd *cmd, int i, char *p, const char *s, size_t len) {
    memcpy(p, s, len);
    p[len] = '\0';
    cmd->argv[i] = p;
    cmd->lens[i] = len;
    return p + len + 1;
}

static size_t text_bytes(int argc, const size_t *lens) {
    size_t bytes = 0;
    int i;
    for (i = 0; i < argc; i++) bytes += lens[i] + 1;
    return bytes;
}

mql_redis_cmd *mql_redis_cmd_new(int argc, const char **argv, const size_t *lens) {
    char *p;
    redis_cmd *cmd = cmd_alloc(argc, text_bytes(argc, lens), &p);
    int i;
    for (i = 0; i < argc; i++) p = put_arg(cmd, i, p, argv[i], lens[i]);
    return cmd;
}

/* script, with its SHA1, from the cache when it was seen lately (host only);
 * the caller gets a reference of its own. */
static redis_script *script_ref(mql_redis *r, const char *script) {
    size_t len = strlen(script);
    redis_script *s;
    int i;
    for (i = 0; i < SHA_CACHE; i++) {
        s = r->sha_cache[i];
        if (s && s->len == len && memcmp(s->text, script, len) == 0) goto found;
    }
    s = mql_xmalloc(sizeof(*s) + len + 1);
    s->refs = 1;   /* the cache's */
    s->len = len;
    memcpy(s->text, script, len + 1);
    sha1_hex(script, s->sha);
    i = r->sha_next;
    r->sha_next = (i + 1) % SHA_CACHE;
    script_release(r->sha_cache[i]);
    r->sha_cache[i] = s;
found:
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
    return s;
}

mql_redis_cmd *mql_redis_cmd_eval(mql_redis *r, const char *script, int numkeys, int argc,
                                  const char **argv, const size_t *lens) {
    char nk[16], *p;
    size_t nk_len = (size_t)snprintf(nk, sizeof(nk), "%d", numkeys);
    redis_cmd *cmd = cmd_alloc(argc + 3, nk_len + 1 + text_bytes(argc, lens), &p);
    int i;
    cmd->script = script_ref(r, script);
    cmd->argv[0] = "EVALSHA";
    cmd->lens[0] = 7;
    cmd->argv[1] = cmd->script->sha;
    cmd->lens[1] = 40;
    p = put_arg(cmd, 2, p, nk, nk_len);
    for (i = 0; i < argc; i++) p = put_arg(cmd, i + 3, p, argv[i], lens[i]);
    return cmd;
}

void mql_redis_cmd_free(mql_redis_cmd *cmd) {
    if (cmd) cmd_free(cmd);
}

uint64_t mql_redis_command(mql_redis *r, int argc, const char **argv, const size_t *lens) {
    mql_redis_cmd *cmd = mql_redis_cmd_new(argc, argv, lens);
    return mql_redis_submit(r, &cmd, 1);
}

uint64_t mql_redis_eval(mql_redis *r, const char *script, int numkeys, int argc,
                        const char **argv, const size_t *lens) {
    mql_redis_cmd *cmd = mql_redis_cmd_eval(r, script, numkeys, argc, argv, lens);
    return mql_redis_submit(r, &cmd, 1);
}

void mql_redis_stats(mql_redis *r, uint64_t *round_trips, uint64_t *commands) {
    pthread_mutex_lock(&r->mu);
    *round_trips = r->round_trips;
    *commands = r->commands;
    pthread_mutex_unlock(&r->mu);
}
