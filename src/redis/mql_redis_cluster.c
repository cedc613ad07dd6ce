/* mql_redis_cluster.c -- Redis Cluster routing (see mql_redis_cluster.h). */
#include "mql_redis_cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REDIRECTS 16

uint16_t mql_crc16(const char *buf, size_t len) {
    uint16_t crc = 0;
    size_t i;
    int bit;
    for (i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (bit = 0; bit < 8; bit++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

int mql_cluster_slot(const char *key, size_t len) {
    const char *open = memchr(key, '{', len), *close;
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        close = memchr(open + 1, '}', rest);
        if (close && close > open + 1) {
            key = open + 1;
            len = (size_t)(close - open - 1);
        }
    }
    return mql_crc16(key, len) & (MQL_CLUSTER_SLOTS - 1);
}

int mql_cluster_redirect(const char *err, int *slot, char *host, size_t hostlen, int *port) {
    int kind;
    const char *p, *colon;
    char *end;
    long n;
    if (strncmp(err, "MOVED ", 6) == 0) kind = 1;
    else if (strncmp(err, "ASK ", 4) == 0) kind = 2;
    else return 0;
    p = err + (kind == 1 ? 6 : 4);
    n = strtol(p, &end, 10);
    if (end == p || *end != ' ' || n < 0 || n >= MQL_CLUSTER_SLOTS) return 0;
    p = end + 1;
    colon = strrchr(p, ':');
    if (!colon || (size_t)(colon - p) >= hostlen) return 0;
    memcpy(host, p, (size_t)(colon - p));
    host[colon - p] = '\0';
    n = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || n <= 0 || n > 65535) return 0;
    *port = (int)n;
    *slot = (int)strtol(err + (kind == 1 ? 6 : 4), NULL, 10);
    return kind;
}

void mql_cluster_init(mql_cluster *cl) {
    memset(cl, 0, sizeof(*cl));
    for (int i = 0; i < MQL_CLUSTER_SLOTS; i++) cl->slot_node[i] = -1;
    cl->stale = 1;
}

static void drop_node(mql_cluster_node *n) {
    if (n->ctx) redisFree(n->ctx);
    n->ctx = NULL;
}

void mql_cluster_close(mql_cluster *cl) {
    for (int i = 0; i < cl->nnodes; i++) drop_node(&cl->nodes[i]);
}

int mql_cluster_node_index(mql_cluster *cl, const char *host, int port) {
    int i;
    for (i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].port == port && strcmp(cl->nodes[i].host, host) == 0) return i;
    if (cl->nnodes == MQL_CLUSTER_MAX_NODES || strlen(host) >= sizeof(cl->nodes[0].host))
        return -1;
    snprintf(cl->nodes[i].host, sizeof(cl->nodes[i].host), "%s", host);
    cl->nodes[i].port = port;
    cl->nodes[i].ctx = NULL;
    return cl->nnodes++;
}

/* One CLUSTER SLOTS entry: [start, end, [host, port, ...], replicas...]. */
static int load_range(mql_cluster *cl, const redisReply *e) {
    const redisReply *master;
    long long lo, hi;
    int node;
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) return 0;
    if (e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER)
        return 0;
    master = e->element[2];
    if (master->type != REDIS_REPLY_ARRAY || master->elements < 2 ||
        master->element[0]->type != REDIS_REPLY_STRING ||
        master->element[1]->type != REDIS_REPLY_INTEGER)
        return 0;
    lo = e->element[0]->integer;
    hi = e->element[1]->integer;
    if (lo < 0 || hi >= MQL_CLUSTER_SLOTS || lo > hi) return 0;
    node = mql_cluster_node_index(cl, master->element[0]->str, (int)master->element[1]->integer);
    if (node < 0) return 0;
    for (long long s = lo; s <= hi; s++) cl->slot_node[s] = (int16_t)node;
    return (int)(hi - lo + 1);
}

int mql_cluster_load_slots(mql_cluster *cl, const redisReply *reply) {
    int covered = 0;
    size_t i;
    if (!reply || reply->type != REDIS_REPLY_ARRAY) return 0;
    for (i = 0; i < MQL_CLUSTER_SLOTS; i++) cl->slot_node[i] = -1;
    for (i = 0; i < reply->elements; i++) covered += load_range(cl, reply->element[i]);
    cl->stale = covered == 0;
    return covered;
}

static void transport_fail(redisContext *ctx, mql_result *res, const char *what) {
    const char *code = "UNAVAILABLE";
    if (ctx && ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == ETIMEDOUT))
        code = "TIMEOUT";
    mql_result_fail(res, code, "redis cluster %s: %s", what,
                    ctx && ctx->errstr[0] ? ctx->errstr : "connection failed");
}

static redisContext *node_ctx(mql_cluster *cl, int i, mql_cluster_connect_fn connect,
                              void *arg, mql_result *res) {
    mql_cluster_node *n = &cl->nodes[i];
    if (!n->ctx) n->ctx = connect(arg, n->host, n->port, res);
    return n->ctx;
}

/* Reads CLUSTER SLOTS from the first node that answers. */
static int refresh(mql_cluster *cl, mql_cluster_connect_fn connect, void *arg, mql_result *res) {
    int i, n = cl->nnodes;
    for (i = 0; i < n; i++) {
        redisContext *ctx = node_ctx(cl, i, connect, arg, res);
        redisReply *reply;
        if (!ctx) continue;
        reply = redisCommand(ctx, "CLUSTER SLOTS");
        if (!reply) {
            transport_fail(ctx, res, "CLUSTER SLOTS");
            drop_node(&cl->nodes[i]);
            continue;
        }
        if (mql_cluster_load_slots(cl, reply) > 0) {
            freeReplyObject(reply);
            return 0;
        }
        freeReplyObject(reply);
    }
    if (res->ok || !res->code[0])
        mql_result_fail(res, "UNAVAILABLE", "redis cluster: no node answered CLUSTER SLOTS");
    return -1;
}

static void pause_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* The node for a command's key, or for a keyless command the first mapped one. */
static int route(const mql_cluster *cl, int argc, const char **argv, const size_t *lens,
                 int key_index) {
    if (key_index > 0 && key_index < argc)
        return cl->slot_node[mql_cluster_slot(argv[key_index], lens[key_index])];
    for (int s = 0; s < MQL_CLUSTER_SLOTS; s++)
        if (cl->slot_node[s] >= 0) return cl->slot_node[s];
    return -1;
}

/* Sends ASKING then the command; NULL on a transport failure. */
static redisReply *send_cmd(redisContext *ctx, int asking, int argc, const char **argv,
                            const size_t *lens) {
    if (asking) {
        redisReply *ok = redisCommand(ctx, "ASKING");
        if (!ok) return NULL;
        freeReplyObject(ok);
    }
    return redisCommandArgv(ctx, argc, argv, lens);
}

redisReply *mql_cluster_run(mql_cluster *cl, mql_cluster_connect_fn connect, void *arg,
                            int argc, const char **argv, const size_t *lens, int key_index,
                            mql_result *res) {
    int node, asking = 0, tries;
    mql_result_ok(res);
    if (cl->stale && refresh(cl, connect, arg, res) < 0) return NULL;
    node = route(cl, argc, argv, lens, key_index);
    for (tries = 0; tries < MAX_REDIRECTS; tries++) {
        char host[128];
        int slot, port, kind;
        redisContext *ctx;
        redisReply *reply;
        if (node < 0) {
            cl->stale = 1;
            mql_result_fail(res, "UNAVAILABLE", "redis cluster: no node serves the slot");
            return NULL;
        }
        ctx = node_ctx(cl, node, connect, arg, res);
        if (!ctx) {
            cl->stale = 1;
            return NULL;
        }
        reply = send_cmd(ctx, asking, argc, argv, lens);
        if (!reply) {   /* the command may have run: never send it again */
            transport_fail(ctx, res, argv[0]);
            drop_node(&cl->nodes[node]);
            cl->stale = 1;
            return NULL;
        }
        if (reply->type != REDIS_REPLY_ERROR) return reply;
        if (strncmp(reply->str, "TRYAGAIN", 8) == 0) {   /* a slot half migrated */
            freeReplyObject(reply);
            pause_ms(20);
            continue;
        }
        if (strncmp(reply->str, "CLUSTERDOWN", 11) == 0) cl->stale = 1;
        kind = mql_cluster_redirect(reply->str, &slot, host, sizeof(host), &port);
        if (!kind) return reply;
        freeReplyObject(reply);
        if (!host[0]) snprintf(host, sizeof(host), "%s", cl->nodes[node].host);
        asking = kind == 2;
        node = mql_cluster_node_index(cl, host, port);
        if (kind == 1) {
            if (node >= 0) cl->slot_node[slot] = (int16_t)node;
            cl->stale = 1;   /* a slot moved: read the whole map before the next command */
        }
    }
    mql_result_fail(res, "UNAVAILABLE", "redis cluster: too many redirects for %s", argv[0]);
    return NULL;
}
