/* mql_redis.c -- a hiredis connection on its own thread (see mql_redis.h).
 *
 * The thread takes commands from a FIFO in order, one at a time, on one
 * synchronous connection: simple, ordered, and never in the way of the gRPC
 * thread or the host. Between commands it renews the registered locks that
 * are due. A broken connection is dropped and re-made by the next command; a
 * command is never sent twice, because a reply lost after the server ran it
 * (an INCR, say) must not run it again.
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
#include <sys/time.h>
#include <time.h>

#include "mql.h"

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

typedef struct keepalive {
    struct keepalive *next;
    uint64_t id;
    char *key, *owner;
    int64_t ttl_ms, every_ms;
    int64_t next_at;         /* monotonic ms of the next renewal */
    int64_t until;           /* stop renewing after this */
    int64_t last_ok;         /* the key cannot outlive last_ok + ttl */
    int busy;                /* being renewed with the lock dropped */
    int cancelled;           /* stopped while busy: freed when the renewal returns */
} keepalive;

struct mql_redis {
    char *host, *unix_path, *password;
    int port, db;
    int64_t timeout_ms;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int stopping;
    redis_cmd *head, *tail;
    keepalive *alive;
    uint64_t next_op;
    mql_events events;
    redisContext *ctx;       /* the thread's own */
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

static struct timeval tv_of(int64_t ms) {
    struct timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

static void copy_reply(mql_reply *out, const redisReply *in) {
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
        for (i = 0; i < in->elements; i++) copy_reply(&out->elements[i], in->element[i]);
    }
}

/* ------------------------------------------------------------ connection */

static void disconnect(mql_redis *r) {
    if (r->ctx) redisFree(r->ctx);
    r->ctx = NULL;
}

/* A transport failure as a result: TIMEOUT or UNAVAILABLE. */
static void transport_fail(mql_redis *r, mql_result *res, const char *what) {
    const char *code = "UNAVAILABLE";
    if (r->ctx && r->ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == ETIMEDOUT))
        code = "TIMEOUT";
    mql_result_fail(res, code, "redis %s: %s", what,
                    r->ctx && r->ctx->errstr[0] ? r->ctx->errstr : "connection failed");
    disconnect(r);
}

/* Sends one setup command (AUTH, SELECT); 0 if the server said OK. */
static int setup_command(mql_redis *r, mql_result *res, int argc, const char **argv) {
    redisReply *reply = redisCommandArgv(r->ctx, argc, argv, NULL);
    if (!reply) {
        transport_fail(r, res, argv[0]);
        return -1;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        mql_result_fail(res, "REDIS_AUTH", "redis %s: %s", argv[0], reply->str);
        freeReplyObject(reply);
        disconnect(r);
        return -1;
    }
    freeReplyObject(reply);
    return 0;
}

static int ensure_connected(mql_redis *r, mql_result *res) {
    struct timeval tv = tv_of(r->timeout_ms);
    char db[16];
    if (r->ctx) return 0;
    r->ctx = r->unix_path ? redisConnectUnixWithTimeout(r->unix_path, tv)
                          : redisConnectWithTimeout(r->host, r->port, tv);
    if (!r->ctx || r->ctx->err) {
        mql_result_fail(res, "UNAVAILABLE", "redis connect to %s:%d: %s",
                        r->unix_path ? r->unix_path : r->host, r->unix_path ? 0 : r->port,
                        r->ctx ? r->ctx->errstr : "out of memory");
        disconnect(r);
        return -1;
    }
    redisSetTimeout(r->ctx, tv);
    if (!r->unix_path) redisEnableKeepAlive(r->ctx);
    if (r->password && *r->password) {
        const char *argv[2] = {"AUTH", r->password};
        if (setup_command(r, res, 2, argv) < 0) return -1;
    }
    if (r->db > 0) {
        const char *argv[2] = {"SELECT", db};
        snprintf(db, sizeof(db), "%d", r->db);
        if (setup_command(r, res, 2, argv) < 0) return -1;
    }
    return 0;
}

/* Runs argv; on NOSCRIPT re-runs it as EVAL with the script. NULL + res on failure. */
static redisReply *run(mql_redis *r, int argc, char **argv, size_t *lens, const char *script,
                       mql_result *res) {
    redisReply *reply;
    if (ensure_connected(r, res) < 0) return NULL;
    reply = redisCommandArgv(r->ctx, argc, (const char **)argv, lens);
    if (!reply) {
        transport_fail(r, res, argv[0]);
        return NULL;
    }
    if (script && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0) {
        char *sha = argv[1];
        size_t sha_len = lens[1];
        freeReplyObject(reply);
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = (char *)script;
        lens[1] = strlen(script);
        reply = redisCommandArgv(r->ctx, argc, (const char **)argv, lens);
        argv[0] = "EVALSHA";
        lens[0] = 7;
        argv[1] = sha;
        lens[1] = sha_len;
        if (!reply) {
            transport_fail(r, res, "EVAL");
            return NULL;
        }
    }
    mql_result_ok(res);
    return reply;
}

/* ------------------------------------------------------------ the thread */

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
    redisReply *reply = run(r, cmd->argc, cmd->argv, cmd->lens, cmd->script, &ev->result);
    if (reply) {
        ev->reply = mql_xcalloc(1, sizeof(*ev->reply));
        copy_reply(ev->reply, reply);
        freeReplyObject(reply);
    }
    mql_events_push(&r->events, ev);
}

static void keepalive_free(keepalive *k) {
    free(k->key);
    free(k->owner);
    free(k);
}

/* Renews one lock; returns 0 to keep it, -1 when it is lost or done. */
static int renew_lock(mql_redis *r, keepalive *k, int64_t now) {
    char ttl[24];
    char *argv[6];
    size_t lens[6];
    mql_result res;
    redisReply *reply;
    int kept;
    if (now >= k->until) return -1;   /* its budget is spent: let it expire */
    snprintf(ttl, sizeof(ttl), "%lld", (long long)k->ttl_ms);
    argv[0] = "EVALSHA";
    argv[1] = r->renew_sha;
    argv[2] = "1";
    argv[3] = k->key;
    argv[4] = k->owner;
    argv[5] = ttl;
    for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
    reply = run(r, 6, argv, lens, RENEW_SCRIPT, &res);
    if (!reply) {
        /* unreachable: try again soon, while the key may still be ours */
        if (now - k->last_ok >= k->ttl_ms) goto lost;
        k->next_at = now + (k->every_ms < 500 ? k->every_ms : 500);
        return 0;
    }
    kept = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
    freeReplyObject(reply);
    if (!kept) goto lost;
    k->last_ok = now;
    k->next_at = now + k->every_ms;
    return 0;
lost: {
        mql_event *ev = mql_event_new(MQL_EV_LOCK_LOST, 0);
        ev->lease_id = k->id;
        mql_events_push(&r->events, ev);
        return -1;
    }
}

static int64_t next_keepalive(const mql_redis *r) {
    int64_t next = INT64_MAX;
    const keepalive *k;
    for (k = r->alive; k; k = k->next)
        if (!k->busy && k->next_at < next) next = k->next_at;
    return next;
}

static void wait_until(mql_redis *r, int64_t when_mono) {
    struct timespec ts;
    int64_t ms = when_mono - mql_now_ms();
    if (when_mono == INT64_MAX) {
        pthread_cond_wait(&r->cond, &r->mu);
        return;
    }
    if (ms <= 0) return;
    mql_abstime_after(&ts, ms);
    pthread_cond_timedwait(&r->cond, &r->mu, &ts);
}

static void *thread_main(void *arg) {
    mql_redis *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        redis_cmd *cmd = r->head;
        keepalive **pp, *k;
        int64_t now = mql_now_ms();
        if (cmd) {
            r->head = cmd->next;
            if (!r->head) r->tail = NULL;
            pthread_mutex_unlock(&r->mu);
            exec_cmd(r, cmd);
            cmd_free(cmd);
            pthread_mutex_lock(&r->mu);
            continue;
        }
        for (k = r->alive; k; k = k->next)
            if (!k->busy && k->next_at <= now) break;
        if (k) {
            int keep;
            k->busy = 1;
            pthread_mutex_unlock(&r->mu);
            keep = renew_lock(r, k, now);
            pthread_mutex_lock(&r->mu);
            k->busy = 0;
            if (keep < 0 || k->cancelled) {
                for (pp = &r->alive; *pp != k; pp = &(*pp)->next) {
                }
                *pp = k->next;
                keepalive_free(k);
            }
            continue;
        }
        wait_until(r, next_keepalive(r));
    }
    pthread_mutex_unlock(&r->mu);
    disconnect(r);
    return NULL;
}

/* ------------------------------------------------------------ public */

mql_redis *mql_redis_new(const mql_redis_config *cfg, char *err, size_t errlen) {
    mql_redis *r = mql_xcalloc(1, sizeof(*r));
    sigset_t all, old;
    r->host = cfg->host ? mql_strdup(cfg->host) : NULL;
    r->unix_path = cfg->unix_path ? mql_strdup(cfg->unix_path) : NULL;
    r->password = cfg->password ? mql_strdup(cfg->password) : NULL;
    r->port = cfg->port;
    r->db = cfg->db;
    r->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 1000;
    sha1_hex(RENEW_SCRIPT, r->renew_sha);
    if (mql_events_init(&r->events) < 0) {
        snprintf(err, errlen, "cannot create an eventfd");
        free(r->host);
        free(r->unix_path);
        free(r->password);
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cond, NULL);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    r->thread_started = pthread_create(&r->thread, NULL, thread_main, r) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!r->thread_started) {
        snprintf(err, errlen, "cannot start the redis thread");
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
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->mu);
    if (r->thread_started) pthread_join(r->thread, NULL);
    for (cmd = r->head; cmd; cmd = next) {
        next = cmd->next;
        cmd_free(cmd);
    }
    for (k = r->alive; k; k = knext) {
        knext = k->next;
        keepalive_free(k);
    }
    mql_events_destroy(&r->events);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mu);
    free(r->host);
    free(r->unix_path);
    free(r->password);
    free(r);
}

int mql_redis_fd(const mql_redis *r) {
    return r->events.fd;
}

mql_event *mql_redis_take_events(mql_redis *r) {
    return mql_events_take(&r->events);
}

static uint64_t enqueue(mql_redis *r, redis_cmd *cmd) {
    uint64_t op;
    pthread_mutex_lock(&r->mu);
    op = cmd->op = ++r->next_op;
    if (r->tail) r->tail->next = cmd;
    else r->head = cmd;
    r->tail = cmd;
    pthread_cond_signal(&r->cond);
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
                             int64_t every_ms, int64_t max_ms) {
    keepalive *k = mql_xcalloc(1, sizeof(*k));
    int64_t now = mql_now_ms();
    uint64_t id;
    k->key = mql_strdup(key);
    k->owner = mql_strdup(owner);
    k->ttl_ms = ttl_ms;
    k->every_ms = every_ms > 0 ? every_ms : ttl_ms / 3;
    k->next_at = now + k->every_ms;
    k->until = max_ms > 0 ? now + max_ms : INT64_MAX;
    k->last_ok = now;
    pthread_mutex_lock(&r->mu);
    id = k->id = ++r->next_op;
    k->next = r->alive;
    r->alive = k;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->mu);
    return id;
}

void mql_redis_keepalive_stop(mql_redis *r, uint64_t id) {
    keepalive **pp, *k;
    pthread_mutex_lock(&r->mu);
    for (pp = &r->alive; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            k = *pp;
            if (k->busy) {
                k->cancelled = 1;   /* the thread frees it when the renewal returns */
            } else {
                *pp = k->next;
                keepalive_free(k);
            }
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
}
