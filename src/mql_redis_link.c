/* mql_redis_link.c -- connect, authenticate, run (see mql_redis_link.h). */
#include "mql_redis_link.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

struct mql_redis_link {
    char *host, *unix_path, *username, *password;
    int port, db;
    int64_t timeout_ms;
    redisContext *ctx;       /* the one connection */
};

static struct timeval tv_of(int64_t ms) {
    struct timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

static char *dup_or_null(const char *s) {
    return s ? mql_strdup(s) : NULL;
}

mql_redis_link *mql_redis_link_new(const mql_redis_config *cfg) {
    mql_redis_link *l = mql_xcalloc(1, sizeof(*l));
    l->host = dup_or_null(cfg->host);
    l->unix_path = dup_or_null(cfg->unix_path);
    l->username = dup_or_null(cfg->username);
    l->password = dup_or_null(cfg->password);
    l->port = cfg->port;
    l->db = cfg->db;
    l->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 1000;
    return l;
}

static void drop(redisContext **ctx) {
    if (*ctx) redisFree(*ctx);
    *ctx = NULL;
}

void mql_redis_link_free(mql_redis_link *l) {
    if (!l) return;
    drop(&l->ctx);
    free(l->host);
    free(l->unix_path);
    free(l->username);
    free(l->password);
    free(l);
}

/* A transport failure as a result: TIMEOUT or UNAVAILABLE. */
static void transport_fail(redisContext *ctx, mql_result *res, const char *what) {
    const char *code = "UNAVAILABLE";
    if (ctx && ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == ETIMEDOUT))
        code = "TIMEOUT";
    mql_result_fail(res, code, "redis %s: %s", what,
                    ctx && ctx->errstr[0] ? ctx->errstr : "connection failed");
}

/* Sends one setup command (AUTH, SELECT); 0 if the server said OK. */
static int setup_command(redisContext *ctx, mql_result *res, int argc, const char **argv) {
    redisReply *reply = redisCommandArgv(ctx, argc, argv, NULL);
    if (!reply) {
        transport_fail(ctx, res, argv[0]);
        return -1;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        mql_result_fail(res, "REDIS_AUTH", "redis %s: %s", argv[0], reply->str);
        freeReplyObject(reply);
        return -1;
    }
    freeReplyObject(reply);
    return 0;
}

static int authenticate(const mql_redis_link *l, redisContext *ctx, int select_db,
                        mql_result *res) {
    char db[16];
    if (l->password && *l->password) {
        const char *argv[3] = {"AUTH", l->username, l->password};
        int with_user = l->username && *l->username;
        if (!with_user) argv[1] = l->password;
        if (setup_command(ctx, res, with_user ? 3 : 2, argv) < 0) return -1;
    }
    if (select_db && l->db > 0) {
        const char *argv[2] = {"SELECT", db};
        snprintf(db, sizeof(db), "%d", l->db);
        if (setup_command(ctx, res, 2, argv) < 0) return -1;
    }
    return 0;
}

redisContext *mql_redis_link_connect(const mql_redis_link *l, const char *host, int port,
                                     int select_db, mql_result *res) {
    struct timeval tv = tv_of(l->timeout_ms);
    redisContext *ctx = port ? redisConnectWithTimeout(host, port, tv)
                             : redisConnectUnixWithTimeout(host, tv);
    if (!ctx || ctx->err) {
        mql_result_fail(res, "UNAVAILABLE", "redis connect to %s:%d: %s", host, port,
                        ctx ? ctx->errstr : "out of memory");
        drop(&ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    if (port) redisEnableKeepAlive(ctx);
    if (authenticate(l, ctx, select_db, res) < 0) {
        drop(&ctx);
        return NULL;
    }
    return ctx;
}

redisReply *mql_redis_link_run(mql_redis_link *l, int argc, const char **argv,
                               const size_t *lens, int key_index, mql_result *res) {
    redisReply *reply;
    (void)key_index;
    if (!l->ctx) {
        l->ctx = l->unix_path ? mql_redis_link_connect(l, l->unix_path, 0, 1, res)
                              : mql_redis_link_connect(l, l->host, l->port, 1, res);
        if (!l->ctx) return NULL;
    }
    reply = redisCommandArgv(l->ctx, argc, argv, lens);
    if (!reply) {
        transport_fail(l->ctx, res, argv[0]);
        drop(&l->ctx);
        return NULL;
    }
    mql_result_ok(res);
    return reply;
}
