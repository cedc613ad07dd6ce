/* mql_redis_cluster_pipeline.c -- many commands over a Redis Cluster at once
 * (mql_cluster_run_many, see mql_redis_cluster.h).
 *
 * mql_cluster_run sends one command and waits for its reply before the next,
 * so a node that takes connections but never answers (a frozen process, a
 * blackholed route) holds every command behind it for a timeout, and one more
 * when the map is then read again. The lock keepalive renews the locks of
 * every node in one round: run so, one silent node made the renewals of all
 * nodes wait, and the locks on healthy nodes could lapse. Here each node's
 * share of the commands is one pipeline, every share is written before any
 * reply is waited for, and the replies of all nodes are read together (poll)
 * until one deadline: a silent node costs the round one timeout and the other
 * nodes' commands nothing.
 *
 * A share's replies come back in the order of its commands on its one
 * connection, so each is matched to its command by position, as on one
 * server (mql_redis_link.c). Node indexes hold until the map is loaded again,
 * which only the redirects, followed last, can do.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "mql_redis_cluster.h"
#include "mql_redis_link.h"

/* One node's commands of the batch. */
typedef struct share {
    int node;            /* index in cl->nodes */
    redisContext *ctx;   /* the node table's; NULL once this share failed or is done */
    int next;            /* no command before this one awaits a reply */
    int left;            /* replies still awaited */
} share;

typedef struct batch {
    mql_cluster *cl;
    mql_cluster_connect_fn connect;
    void *arg;
    int n;
    const mql_redis_argv *cmds;
    redisReply **replies;
    mql_result *res;
    /* owned, n each: the share of command i (-1: failed before it was sent),
     * the shares, and the poll set */
    int *share_of;
    share *shares;
    int nshares;
    struct pollfd *pfd;
} batch;

static void batch_init(batch *b, int n) {
    b->n = n;
    b->share_of = mql_xcalloc((size_t)n, sizeof(*b->share_of));
    b->shares = mql_xcalloc((size_t)n, sizeof(*b->shares));
    b->pfd = mql_xcalloc((size_t)n, sizeof(*b->pfd));
    b->nshares = 0;
    for (int i = 0; i < n; i++) {
        b->replies[i] = NULL;
        mql_result_ok(&b->res[i]);
    }
}

static void batch_free(batch *b) {
    free(b->share_of);
    free(b->shares);
    free(b->pfd);
}

static int share_for(batch *b, int node) {
    for (int k = 0; k < b->nshares; k++)
        if (b->shares[k].node == node) return k;
    b->shares[b->nshares] = (share){node, NULL, 0, 0};
    return b->nshares++;
}

/* Each command to the share of its node; one no node serves fails now. */
static void assign(batch *b) {
    for (int i = 0; i < b->n; i++) {
        const mql_redis_argv *c = &b->cmds[i];
        int node = mql_cluster_route(b->cl, c->argc, c->argv, c->lens, c->key_index);
        b->share_of[i] = node < 0 ? -1 : share_for(b, node);
        if (node >= 0) {
            b->shares[b->share_of[i]].left++;
            continue;
        }
        b->cl->stale = 1;
        mql_result_fail(&b->res[i], "UNAVAILABLE", "redis cluster: no node serves the slot");
    }
}

/* Share k failed: each of its commands without a reply fails with why (each
 * may have run: none is sent again), and with spare set those with one too,
 * since a spare reply proves none can be matched to its command. */
static void fail_share(batch *b, int k, const mql_result *why, int spare) {
    for (int i = 0; i < b->n; i++) {
        if (b->share_of[i] != k || (b->replies[i] && !spare)) continue;
        if (b->replies[i]) freeReplyObject(b->replies[i]);
        b->replies[i] = NULL;
        b->res[i] = *why;
    }
    if (b->shares[k].ctx) mql_cluster_node_broke(b->cl, b->shares[k].node);
    b->shares[k].ctx = NULL;
    b->shares[k].left = 0;
}

/* Connects share k's node if need be and writes its commands, all in one go. */
static void send_share(batch *b, int k) {
    share *s = &b->shares[k];
    mql_result why;
    int i, done = 0;
    s->ctx = mql_cluster_node_ctx(b->cl, s->node, b->connect, b->arg, &why);
    if (!s->ctx) {   /* as in mql_cluster_run: a node gone, read the map again */
        b->cl->stale = 1;
        fail_share(b, k, &why, 0);
        return;
    }
    for (i = 0; i < b->n; i++) {
        const mql_redis_argv *c = &b->cmds[i];
        if (b->share_of[i] == k &&
            redisAppendCommandArgv(s->ctx, c->argc, c->argv, c->lens) != REDIS_OK)
            break;
    }
    while (i == b->n && !done)
        if (redisBufferWrite(s->ctx, &done) != REDIS_OK) break;
    if (done) return;
    mql_cluster_transport_fail(s->ctx, &why, "pipeline");
    fail_share(b, k, &why, 0);
}

/* Writes every share: first those whose node is connected already, whose
 * commands then go out before any connect to another node can wait. */
static void send_all(batch *b) {
    for (int connected = 1; connected >= 0; connected--)
        for (int k = 0; k < b->nshares; k++)
            if (!b->shares[k].ctx && b->shares[k].left &&
                (b->cl->nodes[b->shares[k].node].ctx != NULL) == connected)
                send_share(b, k);
}

/* Gives reply to share k's next command awaiting one. */
static void place(batch *b, int k, redisReply *reply) {
    share *s = &b->shares[k];
    while (b->share_of[s->next] != k) s->next++;
    b->replies[s->next] = reply;
    s->next++;
    s->left--;
}

/* Share k's connection is readable: takes what came, and every whole reply. */
static void take_replies(batch *b, int k) {
    share *s = &b->shares[k];
    mql_result why;
    void *reply = NULL;
    if (redisBufferRead(s->ctx) != REDIS_OK) goto broke;
    while (s->left > 0) {
        if (redisGetReplyFromReader(s->ctx, &reply) != REDIS_OK) goto broke;
        if (!reply) return;   /* the rest is still on its way */
        place(b, k, reply);
        reply = NULL;
    }
    if (s->ctx->reader->len > s->ctx->reader->pos) {
        mql_result_fail(&why, "UNAVAILABLE", "redis cluster: more replies than commands sent");
        fail_share(b, k, &why, 1);
        return;
    }
    s->ctx = NULL;   /* done: the node keeps its connection */
    return;
broke:
    mql_cluster_transport_fail(s->ctx, &why, "pipeline");
    fail_share(b, k, &why, 0);
}

/* The shares still awaiting replies into b->pfd; how many. */
static int poll_set(batch *b, int *which) {
    int m = 0;
    for (int k = 0; k < b->nshares; k++) {
        if (!b->shares[k].ctx || b->shares[k].left == 0) continue;
        b->pfd[m] = (struct pollfd){b->shares[k].ctx->fd, POLLIN, 0};
        which[m++] = k;
    }
    return m;
}

/* Reads every share's replies as they come until deadline; a share still
 * short of replies then fails TIMEOUT, alone. */
static void read_all(batch *b, int64_t deadline) {
    int *which = mql_xcalloc((size_t)b->n, sizeof(*which));
    int m;
    while ((m = poll_set(b, which)) > 0) {
        int64_t wait = deadline - mql_now_ms();
        if (wait <= 0 || poll(b->pfd, (nfds_t)m, (int)wait) == 0) break;
        for (int j = 0; j < m; j++)
            if (b->pfd[j].revents) take_replies(b, which[j]);
    }
    for (int j = 0; j < m; j++) {
        const mql_cluster_node *node = &b->cl->nodes[b->shares[which[j]].node];
        mql_result why;
        mql_result_fail(&why, "TIMEOUT", "redis cluster %s:%d: no reply in time", node->host,
                        node->port);
        fail_share(b, which[j], &why, 0);
    }
    free(which);
}

static int is_error(const redisReply *r, const char *prefix) {
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, prefix, strlen(prefix)) == 0;
}

/* A MOVED, ASK or TRYAGAIN reply proves its command did not run: it runs
 * again, alone, through mql_cluster_run, which follows it (and reads the map
 * again first after a MOVED). A CLUSTERDOWN stays the command's answer. */
static void follow_redirects(batch *b) {
    for (int i = 0; i < b->n; i++) {
        redisReply *r = b->replies[i];
        const mql_redis_argv *c = &b->cmds[i];
        char host[128];
        int slot, port;
        if (is_error(r, "CLUSTERDOWN") || is_error(r, "MOVED ")) b->cl->stale = 1;
        if (!is_error(r, "TRYAGAIN") &&
            !(r && r->type == REDIS_REPLY_ERROR &&
              mql_cluster_redirect(r->str, &slot, host, sizeof(host), &port)))
            continue;
        freeReplyObject(r);
        b->replies[i] = mql_cluster_run(b->cl, b->connect, b->arg, c->argc, c->argv, c->lens,
                                        c->key_index, &b->res[i]);
    }
}

void mql_cluster_run_many(mql_cluster *cl, mql_cluster_connect_fn connect, void *arg,
                          int64_t timeout_ms, int n, const mql_redis_argv *cmds,
                          redisReply **replies, mql_result *res) {
    batch b = {.cl = cl, .connect = connect, .arg = arg, .cmds = cmds, .replies = replies,
               .res = res};
    mql_result why;
    if (n <= 0) return;
    batch_init(&b, n);
    if (mql_cluster_ready(cl, connect, arg, &why) < 0) {
        for (int i = 0; i < n; i++) res[i] = why;
    } else {
        assign(&b);
        send_all(&b);
        read_all(&b, mql_now_ms() + timeout_ms);
        follow_redirects(&b);
    }
    batch_free(&b);
}
