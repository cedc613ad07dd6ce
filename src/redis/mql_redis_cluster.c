/* mql_redis_cluster.c -- Redis Cluster routing (see mql_redis_cluster.h). */
#include "mql_redis_cluster.h"

#include "mql_redis_link.h"

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
    /* "?": the node has no endpoint to give (clusterNodePreferredEndpoint in
     * Redis' src/cluster.c, hostname endpoints with no hostname set) */
    if (colon - p == 1 && *p == '?') return 0;
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

static void free_table(mql_cluster_node *t, int n) {
    for (int i = 0; i < n; i++) drop_node(&t[i]);
    free(t);
}

void mql_cluster_close(mql_cluster *cl) {
    free_table(cl->nodes, cl->nnodes);
    free_table(cl->seeds, cl->nseeds);
    cl->nodes = cl->seeds = NULL;
    cl->nnodes = cl->cap = cl->nseeds = cl->seeds_cap = 0;
}

/* ------------------------------------------------------------ node tables */

/* A node table is an array, its length and its room: the nodes, or the seeds. */
static int find_node(const mql_cluster_node *t, int n, const char *host, int port) {
    for (int i = 0; i < n; i++)
        if (t[i].port == port && strcmp(t[i].host, host) == 0) return i;
    return -1;
}

/* Appends host:port (not connected) to *t, growing it; its index, or -1 when
 * the host is longer than a node's name. */
static int append_node(mql_cluster_node **t, int *n, int *cap, const char *host, int port) {
    if (strlen(host) >= sizeof((*t)->host)) return -1;
    if (*n == *cap) {
        int room = *cap ? *cap * 2 : 8;
        mql_cluster_node *grown = mql_xcalloc((size_t)room, sizeof(*grown));
        if (*n) memcpy(grown, *t, (size_t)*n * sizeof(*grown));
        free(*t);
        *t = grown;
        *cap = room;
    }
    snprintf((*t)[*n].host, sizeof((*t)[*n].host), "%s", host);
    (*t)[*n].port = port;
    (*t)[*n].ctx = NULL;
    return (*n)++;
}

static int find_or_append(mql_cluster_node **t, int *n, int *cap, const char *host, int port) {
    int i = find_node(*t, *n, host, port);
    return i >= 0 ? i : append_node(t, n, cap, host, port);
}

int mql_cluster_node_index(mql_cluster *cl, const char *host, int port) {
    return find_or_append(&cl->nodes, &cl->nnodes, &cl->cap, host, port);
}

int mql_cluster_add_seed(mql_cluster *cl, const char *host, int port) {
    return find_or_append(&cl->seeds, &cl->nseeds, &cl->seeds_cap, host, port) < 0 ? -1 : 0;
}

/* ------------------------------------------------------------ CLUSTER SLOTS */

/* A table being built from one reply, replacing cl's node table if it maps a slot. */
typedef struct table_build {
    mql_cluster_node *nodes;
    int n, cap;
} table_build;

/* The host an entry's endpoint names, or NULL for no node. The CLUSTER SLOTS
 * documentation gives three that are no host name: NULL (the node's endpoint
 * is unknown: cluster-preferred-endpoint-type unknown-endpoint) and "" (the
 * node does not know its own IP, as in a cluster of one node) both mean the
 * node the question was asked of, at the port given; "?" (hostname endpoints
 * with no cluster-announce-hostname) is an unknown node, not that one. */
static const char *entry_host(const redisReply *endpoint, const char *asked) {
    if (endpoint->type == REDIS_REPLY_NIL) return asked;
    if (endpoint->type != REDIS_REPLY_STRING) return NULL;
    if (endpoint->str[0] == '\0') return asked;
    return strcmp(endpoint->str, "?") == 0 ? NULL : endpoint->str;
}

/* A node of an entry: [host, port, id, ...]; its index in b, -1 if malformed
 * or unknown. asked: the host the reply came from. */
static int add_entry_node(table_build *b, const redisReply *node, const char *asked) {
    const char *host;
    long long port;
    if (node->type != REDIS_REPLY_ARRAY || node->elements < 2 ||
        node->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    host = entry_host(node->element[0], asked);
    port = node->element[1]->integer;
    if (!host || port <= 0 || port > 65535) return -1;
    return find_or_append(&b->nodes, &b->n, &b->cap, host, (int)port);
}

/* An entry's slot range: [start, end, master, replicas...]; 0 if well formed. */
static int entry_range(const redisReply *e, long long *lo, long long *hi) {
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) return -1;
    if (e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    *lo = e->element[0]->integer;
    *hi = e->element[1]->integer;
    return *lo < 0 || *hi >= MQL_CLUSTER_SLOTS || *lo > *hi ? -1 : 0;
}

/* Maps one entry's slots to its master in b; the slots covered. */
static int load_range(mql_cluster *cl, table_build *b, const redisReply *e, const char *asked) {
    long long lo, hi;
    int node;
    if (entry_range(e, &lo, &hi) < 0 || (node = add_entry_node(b, e->element[2], asked)) < 0)
        return 0;
    for (long long s = lo; s <= hi; s++) cl->slot_node[s] = node;
    return (int)(hi - lo + 1);
}

/* Makes b the node table: a node still named keeps its connection, the
 * others' are closed. */
static void adopt_table(mql_cluster *cl, table_build *b) {
    for (int i = 0; i < b->n; i++) {
        int old = find_node(cl->nodes, cl->nnodes, b->nodes[i].host, b->nodes[i].port);
        if (old < 0) continue;
        b->nodes[i].ctx = cl->nodes[old].ctx;
        cl->nodes[old].ctx = NULL;
    }
    free_table(cl->nodes, cl->nnodes);
    cl->nodes = b->nodes;
    cl->nnodes = b->n;
    cl->cap = b->cap;
}

int mql_cluster_load_slots(mql_cluster *cl, const redisReply *reply, const char *asked) {
    table_build b = {NULL, 0, 0};
    int covered = 0;
    size_t i, k;
    if (!reply || reply->type != REDIS_REPLY_ARRAY) return 0;
    for (i = 0; i < MQL_CLUSTER_SLOTS; i++) cl->slot_node[i] = -1;
    for (i = 0; i < reply->elements; i++) covered += load_range(cl, &b, reply->element[i], asked);
    /* the replicas after every master: candidates to ask for the topology when
     * a master is gone, tried after the masters */
    for (i = 0; i < reply->elements && covered > 0; i++) {
        const redisReply *e = reply->element[i];
        long long lo, hi;
        if (entry_range(e, &lo, &hi) < 0) continue;
        for (k = 3; k < e->elements; k++) add_entry_node(&b, e->element[k], asked);
    }
    cl->stale = covered == 0;
    if (covered == 0) {
        free_table(b.nodes, b.n);
        return 0;
    }
    adopt_table(cl, &b);
    return covered;
}

void mql_cluster_transport_fail(const redisContext *ctx, mql_result *res, const char *what) {
    const char *code = "UNAVAILABLE";
    if (ctx && ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == ETIMEDOUT))
        code = "TIMEOUT";
    mql_result_fail(res, code, "redis cluster %s: %s", what,
                    ctx && ctx->errstr[0] ? ctx->errstr : "connection failed");
}

redisContext *mql_cluster_node_ctx(mql_cluster *cl, int i, mql_cluster_connect_fn connect,
                                   void *arg, mql_result *res) {
    mql_cluster_node *n = &cl->nodes[i];
    /* out of step: a spare reply or a hang-up (mql_redis_ctx_in_step) */
    if (n->ctx && !mql_redis_ctx_in_step(n->ctx)) drop_node(n);
    if (!n->ctx) n->ctx = connect(arg, n->host, n->port, res);
    return n->ctx;
}

enum { SLOTS_LOADED, SLOTS_REFUSED, SLOTS_BROKEN };

/* Asks ctx, a connection to host, for CLUSTER SLOTS and loads the answer.
 * Once loaded, ctx may have been closed (its node is no longer named): the
 * caller must not use it. */
static int ask_slots(mql_cluster *cl, redisContext *ctx, const char *host, mql_result *res) {
    char asked[sizeof(cl->nodes[0].host)];
    redisReply *reply = redisCommand(ctx, "CLUSTER SLOTS");
    int covered;
    if (!reply) {
        mql_cluster_transport_fail(ctx, res, "CLUSTER SLOTS");
        return SLOTS_BROKEN;
    }
    /* a copy: host may lie in the node table the load replaces */
    snprintf(asked, sizeof(asked), "%s", host);
    covered = mql_cluster_load_slots(cl, reply, asked);
    freeReplyObject(reply);
    return covered > 0 ? SLOTS_LOADED : SLOTS_REFUSED;
}

/* Asks the named nodes for CLUSTER SLOTS: those connected when the refresh
 * began (pass 1, connected[i] set) or the others (pass 0); 0 once one
 * answered. */
static int ask_named(mql_cluster *cl, const unsigned char *connected, int pass,
                     mql_cluster_connect_fn connect, void *arg, mql_result *res) {
    for (int i = 0; i < cl->nnodes; i++) {
        redisContext *ctx;
        int got;
        if (connected[i] != pass) continue;
        if (!(ctx = mql_cluster_node_ctx(cl, i, connect, arg, res))) continue;
        got = ask_slots(cl, ctx, cl->nodes[i].host, res);
        if (got == SLOTS_LOADED) return 0;
        if (got == SLOTS_BROKEN) drop_node(&cl->nodes[i]);
    }
    return -1;
}

/* Asks the named nodes, those still connected first: a node that stopped
 * answering had its connection dropped at its timeout, and asking it first
 * would cost every refresh one more timeout while the others answer at once.
 * Each node is asked once. 0 once one answered. */
static int ask_nodes(mql_cluster *cl, mql_cluster_connect_fn connect, void *arg,
                     mql_result *res) {
    unsigned char *connected = mql_xcalloc((size_t)cl->nnodes + 1, 1);
    int n = cl->nnodes, got;
    for (int i = 0; i < n; i++) connected[i] = cl->nodes[i].ctx != NULL;
    got = ask_named(cl, connected, 1, connect, arg, res) == 0 ||
          ask_named(cl, connected, 0, connect, arg, res) == 0;
    free(connected);
    return got ? 0 : -1;
}

/* Reads CLUSTER SLOTS from the first node that answers: the named nodes
 * first (ask_nodes), then the seeds they do not include, each on a connection
 * of its own closed after the question. */
static int refresh(mql_cluster *cl, mql_cluster_connect_fn connect, void *arg, mql_result *res) {
    int i;
    if (ask_nodes(cl, connect, arg, res) == 0) return 0;
    for (i = 0; i < cl->nseeds; i++) {
        mql_cluster_node *seed = &cl->seeds[i];
        redisContext *ctx;
        int got;
        if (find_node(cl->nodes, cl->nnodes, seed->host, seed->port) >= 0) continue;
        if (!(ctx = connect(arg, seed->host, seed->port, res))) continue;
        got = ask_slots(cl, ctx, seed->host, res);
        redisFree(ctx);
        if (got == SLOTS_LOADED) return 0;
    }
    if (res->ok || !res->code[0])
        mql_result_fail(res, "UNAVAILABLE", "redis cluster: no node answered CLUSTER SLOTS");
    return -1;
}

static void pause_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

int mql_cluster_ready(mql_cluster *cl, mql_cluster_connect_fn connect, void *arg,
                      mql_result *res) {
    if (!cl->stale) return 0;
    if (refresh(cl, connect, arg, res) < 0) return -1;
    /* a node asked before the one that answered (a dead seed, a dead master
     * still named) left its failure in res: the command has not even gone
     * yet, and one that runs now must not be reported failed by it */
    mql_result_ok(res);
    return 0;
}

void mql_cluster_node_broke(mql_cluster *cl, int i) {
    drop_node(&cl->nodes[i]);
    cl->stale = 1;
}

int mql_cluster_route(const mql_cluster *cl, int argc, const char **argv, const size_t *lens,
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
    if (mql_cluster_ready(cl, connect, arg, res) < 0) return NULL;
    node = mql_cluster_route(cl, argc, argv, lens, key_index);
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
        ctx = mql_cluster_node_ctx(cl, node, connect, arg, res);
        if (!ctx) {
            cl->stale = 1;
            return NULL;
        }
        reply = send_cmd(ctx, asking, argc, argv, lens);
        if (!reply) {   /* the command may have run: never send it again */
            mql_cluster_transport_fail(ctx, res, argv[0]);
            mql_cluster_node_broke(cl, node);
            return NULL;
        }
        if (reply->type != REDIS_REPLY_ERROR) return reply;
        if (strncmp(reply->str, "TRYAGAIN", 8) == 0) {   /* a slot half migrated */
            freeReplyObject(reply);
            pause_ms(20);
            continue;
        }
        /* a MOVED not followed (to "?", say) still says the map is wrong */
        if (strncmp(reply->str, "CLUSTERDOWN", 11) == 0 || strncmp(reply->str, "MOVED ", 6) == 0)
            cl->stale = 1;
        kind = mql_cluster_redirect(reply->str, &slot, host, sizeof(host), &port);
        if (!kind) return reply;
        freeReplyObject(reply);
        if (!host[0]) snprintf(host, sizeof(host), "%s", cl->nodes[node].host);
        asking = kind == 2;
        node = mql_cluster_node_index(cl, host, port);
        if (kind == 1) {
            if (node >= 0) cl->slot_node[slot] = node;
            cl->stale = 1;   /* a slot moved: read the whole map before the next command */
        }
    }
    mql_result_fail(res, "UNAVAILABLE", "redis cluster: too many redirects for %s", argv[0]);
    return NULL;
}
