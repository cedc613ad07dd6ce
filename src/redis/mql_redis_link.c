/* mql_redis_link.c -- connect, authenticate, run (see mql_redis_link.h).
 *
 * Three modes. One server: the address given. Sentinel: before connecting,
 * ask the sentinels in turn for the master's address (SENTINEL
 * get-master-addr-by-name) and check with ROLE that it is one, going on to
 * the next sentinel when an answer leads to no master; a broken
 * connection is re-resolved by the next command, which is how a failover is
 * followed, and a READONLY reply (a demoted master) re-resolves and runs the
 * command once more, since the server refused it. A connection idle for
 * SENTINEL_RECHECK_MS is checked against the sentinels before its next
 * command: a master frozen (SIGSTOP, a long GC-like pause of its VM) past a
 * failover comes back still a master, and takes writes until the sentinels
 * make it a replica, seconds later, which throws them away; an idle
 * connection from before the freeze would lead there without any error.
 * Cluster: see mql_redis_cluster.c.
 */
#include "mql_redis_link.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "mql_redis_cluster.h"

enum { MODE_SINGLE, MODE_SENTINEL, MODE_CLUSTER };

/* A failover cannot finish in less than the sentinels' down-after-milliseconds
 * (1 s is already a short one): a connection used more recently than this
 * cannot have missed one we could see. */
#define SENTINEL_RECHECK_MS 1000

typedef struct addr {
    char host[128];
    int port;
} addr;

struct mql_redis_link {
    int mode;
    char *host, *unix_path, *username, *password, *master;
    char *sentinel_username, *sentinel_password;
    int port, db;
    int64_t timeout_ms;
    addr *nodes;             /* sentinels, or cluster seeds */
    int nnodes;
    int answered;            /* Sentinel: the index of the one that answered last */
    redisContext *ctx;       /* single and Sentinel: the one connection */
    addr at;                 /* Sentinel: the master ctx leads to */
    int64_t last_used;       /* Sentinel: mql_now_ms of ctx's last reply */
    mql_cluster *cluster;    /* Cluster: the nodes and the slot map */
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

/* "host:port" -> a; 0 if it parses. */
static int parse_addr(const char *s, addr *a) {
    const char *colon = strrchr(s, ':');
    char *end;
    long port;
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof(a->host)) return -1;
    port = strtol(colon + 1, &end, 10);
    if (*end || port <= 0 || port > 65535) return -1;
    memcpy(a->host, s, (size_t)(colon - s));
    a->host[colon - s] = '\0';
    a->port = (int)port;
    return 0;
}

mql_redis_link *mql_redis_link_new(const mql_redis_config *cfg) {
    mql_redis_link *l = mql_xcalloc(1, sizeof(*l));
    int i;
    l->mode = cfg->cluster ? MODE_CLUSTER : cfg->master ? MODE_SENTINEL : MODE_SINGLE;
    l->master = dup_or_null(cfg->master);
    l->sentinel_username = dup_or_null(cfg->sentinel_username);
    l->sentinel_password = dup_or_null(cfg->sentinel_password);
    l->nodes = mql_xcalloc((size_t)(cfg->nnodes > 0 ? cfg->nnodes : 1), sizeof(*l->nodes));
    for (i = 0; i < cfg->nnodes; i++)
        if (parse_addr(cfg->nodes[i], &l->nodes[l->nnodes]) == 0) l->nnodes++;
    if (l->mode == MODE_CLUSTER) {
        l->cluster = mql_xmalloc(sizeof(*l->cluster));
        mql_cluster_init(l->cluster);
        for (i = 0; i < l->nnodes; i++)
            mql_cluster_add_seed(l->cluster, l->nodes[i].host, l->nodes[i].port);
    }
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
    if (l->cluster) mql_cluster_close(l->cluster);
    free(l->cluster);
    free(l->nodes);
    free(l->master);
    free(l->sentinel_username);
    free(l->sentinel_password);
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

/* AUTH [username] password, if a password is set; 0 if none or accepted. */
static int auth(redisContext *ctx, const char *username, const char *password, mql_result *res) {
    const char *argv[3] = {"AUTH", username, password};
    int with_user = username && *username;
    if (!password || !*password) return 0;
    if (!with_user) argv[1] = password;
    return setup_command(ctx, res, with_user ? 3 : 2, argv);
}

static int authenticate(const mql_redis_link *l, redisContext *ctx, int select_db,
                        mql_result *res) {
    char db[16];
    if (auth(ctx, l->username, l->password, res) < 0) return -1;
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

/* A port as a sentinel sends it: decimal digits, 1 to 65535; else 0. */
static int port_of(const char *s) {
    char *end;
    long port;
    if (*s < '0' || *s > '9') return 0;
    port = strtol(s, &end, 10);
    return *end || port > 65535 ? 0 : (int)port;
}

/* The address in a reply to get-master-addr-by-name; 0 if it is one: a host
 * that fits and is not empty, a valid port. A sentinel answering anything
 * else has told us nothing we can dial. */
static int addr_of(const redisReply *reply, addr *a) {
    const redisReply *host, *port;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) return -1;
    host = reply->element[0];
    port = reply->element[1];
    if (host->type != REDIS_REPLY_STRING || port->type != REDIS_REPLY_STRING) return -1;
    if (host->len == 0 || host->len >= sizeof(a->host) || strlen(host->str) != host->len)
        return -1;
    a->port = port_of(port->str);
    if (!a->port) return -1;
    memcpy(a->host, host->str, host->len + 1);
    return 0;
}

/* Sentinel: asks the sentinel at s for the master; 1 with a filled, else 0
 * with why saying what it answered, if it answered. */
static int ask_sentinel(const mql_redis_link *l, const addr *s, addr *a, mql_result *why) {
    struct timeval tv = tv_of(l->timeout_ms);
    redisContext *ctx = redisConnectWithTimeout(s->host, s->port, tv);
    mql_result denied;
    redisReply *reply;
    int found = 0;
    if (!ctx || ctx->err) {
        drop(&ctx);
        return 0;
    }
    redisSetTimeout(ctx, tv);
    if (auth(ctx, l->sentinel_username, l->sentinel_password, &denied) < 0) {
        mql_result_fail(why, denied.code, "%s:%d: %s", s->host, s->port, denied.msg);
        drop(&ctx);
        return 0;
    }
    reply = redisCommand(ctx, "SENTINEL get-master-addr-by-name %s", l->master);
    if (reply && reply->type == REDIS_REPLY_ERROR) {
        int refused = strncmp(reply->str, "NOAUTH", 6) == 0 ||
                      strncmp(reply->str, "WRONGPASS", 9) == 0 ||
                      strncmp(reply->str, "NOPERM", 6) == 0;
        mql_result_fail(why, refused ? "REDIS_AUTH" : "UNAVAILABLE", "%s:%d answered %s", s->host,
                        s->port, reply->str);
    } else if (reply && reply->type == REDIS_REPLY_ARRAY) {
        found = addr_of(reply, a) == 0;
        if (!found)
            mql_result_fail(why, "UNAVAILABLE", "%s:%d named no address one can connect to",
                            s->host, s->port);
    } else if (reply) {
        mql_result_fail(why, "UNAVAILABLE", "%s:%d knows no master of that name", s->host,
                        s->port);
    }
    if (reply) freeReplyObject(reply);
    drop(&ctx);
    return found;
}

/* Sentinel: asks the sentinels in turn for the master, from the one that
 * answered last (a dead one first in the list would cost a timeout on every
 * check); 0 with a filled. When none names one, the failure says why the last
 * one that answered did not (a sentinel with requirepass answers NOAUTH: a
 * misconfiguration, not an outage, so it is REDIS_AUTH), else that none could
 * be reached. */
static int ask_sentinels(mql_redis_link *l, addr *a, mql_result *res) {
    mql_result why;
    int n;
    mql_result_fail(&why, "UNAVAILABLE", "no sentinel could be reached");
    for (n = 0; n < l->nnodes; n++) {
        int i = (l->answered + n) % l->nnodes;
        if (ask_sentinel(l, &l->nodes[i], a, &why)) {
            l->answered = i;
            return 0;
        }
    }
    mql_result_fail(res, why.code, "redis sentinel: no sentinel named a master '%s' (%s)",
                    l->master, why.msg);
    return -1;
}

/* Sentinel: 0 if the server at a says it is a master (ROLE), else -1 with
 * why set. ROLE is in @admin and @dangerous, so a user without them gets
 * NOPERM: that is a configuration to fix (REDIS_AUTH), not a replica. */
static int check_master(redisContext *ctx, const addr *a, mql_result *why) {
    redisReply *reply = redisCommand(ctx, "ROLE");
    int yes = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
              reply->element[0]->type == REDIS_REPLY_STRING &&
              strcmp(reply->element[0]->str, "master") == 0;
    if (!reply)
        transport_fail(ctx, why, "ROLE");
    else if (reply->type == REDIS_REPLY_ERROR &&
             (strncmp(reply->str, "NOPERM", 6) == 0 || strncmp(reply->str, "NOAUTH", 6) == 0))
        mql_result_fail(why, "REDIS_AUTH", "%s:%d refused ROLE: %s", a->host, a->port,
                        reply->str);
    else if (!yes)   /* a failover under way: the sentinel lags */
        mql_result_fail(why, "UNAVAILABLE", "%s:%d is not a master yet", a->host, a->port);
    if (reply) freeReplyObject(reply);
    return yes ? 0 : -1;
}

/* Bytes waiting after the last reply read are no reply to anything we will
 * send: a reply that came twice (hiredis would hand the spare one out as the
 * next command's without even sending that command, and every reply after it
 * would be one behind), or the end of a connection the server closed while it
 * was idle (Redis's `timeout`, a proxy), on which the next command would fail
 * though it never left. */
int mql_redis_ctx_in_step(const redisContext *ctx) {
    struct pollfd p = {ctx->fd, POLLIN, 0};
    if (ctx->reader && ctx->reader->len > ctx->reader->pos) return 0;
    return poll(&p, 1, 0) == 0;
}

/* Sentinel: l->ctx to the master at a, checked with ROLE; 0, else -1 with
 * why set. */
static int connect_to_master(mql_redis_link *l, const addr *a, mql_result *why) {
    l->ctx = mql_redis_link_connect(l, a->host, a->port, 1, why);
    if (!l->ctx) return -1;
    if (check_master(l->ctx, a, why) < 0) {
        drop(&l->ctx);
        return -1;
    }
    l->at = *a;
    l->last_used = mql_now_ms();
    return 0;
}

/* Sentinel: connects to the master some sentinel names, asking them in turn
 * from the one whose answer last led to a master. An answer that leads to no
 * master (nothing listens there, or ROLE says replica: a sentinel that lags a
 * failover still names the old master) costs that sentinel only, and the next
 * is asked, as the Sentinel clients guidelines say for a sentinel that cannot
 * be reached or does not know the master; one that keeps a stale view must not
 * keep the client from a master the others name. An address already tried in
 * this round is not dialled again (a dead master named by every sentinel
 * costs one connect timeout, not one a sentinel). 0, else -1 with res set. */
static int connect_master(mql_redis_link *l, mql_result *res) {
    addr *tried = mql_xcalloc((size_t)(l->nnodes > 0 ? l->nnodes : 1), sizeof(*tried));
    mql_result why;
    int n, ntried = 0, found = 0;
    mql_result_fail(&why, "UNAVAILABLE", "no sentinel could be reached");
    for (n = 0; n < l->nnodes && !found; n++) {
        int i = (l->answered + n) % l->nnodes, t;
        addr a;
        if (!ask_sentinel(l, &l->nodes[i], &a, &why)) continue;
        for (t = 0; t < ntried; t++)
            if (tried[t].port == a.port && strcmp(tried[t].host, a.host) == 0) break;
        if (t < ntried) continue;
        tried[ntried++] = a;
        found = connect_to_master(l, &a, &why) == 0;
        if (found) l->answered = i;
    }
    free(tried);
    if (!found && !ntried)
        mql_result_fail(res, why.code, "redis sentinel: no sentinel named a master '%s' (%s)",
                        l->master, why.msg);
    else if (!found)
        mql_result_fail(res, why.code, "redis sentinel: no master '%s' the sentinels named "
                        "could be used (%s)", l->master, why.msg);
    return found ? 0 : -1;
}

static int connect_single(mql_redis_link *l, mql_result *res) {
    if (l->mode == MODE_SENTINEL) return connect_master(l, res);
    l->ctx = l->unix_path ? mql_redis_link_connect(l, l->unix_path, 0, 1, res)
                          : mql_redis_link_connect(l, l->host, l->port, 1, res);
    return l->ctx ? 0 : -1;
}

/* The connection to send on, made again when it is missing or out of step;
 * 0, else -1 with res set. */
static int connected(mql_redis_link *l, mql_result *res) {
    if (l->ctx && !mql_redis_ctx_in_step(l->ctx)) drop(&l->ctx);
    return l->ctx || connect_single(l, res) == 0 ? 0 : -1;
}

/* Sentinel: drops an idle connection to a server the sentinels no longer name
 * (see the top of this file). When no sentinel answers, the connection stays:
 * the master it leads to is still the best guess, and the command's own reply
 * (READONLY, a broken connection) tells if it is not. */
static void recheck_master(mql_redis_link *l) {
    mql_result ignored;
    addr a;
    if (l->mode != MODE_SENTINEL || !l->ctx || mql_now_ms() - l->last_used < SENTINEL_RECHECK_MS)
        return;
    if (ask_sentinels(l, &a, &ignored) < 0) return;
    if (a.port != l->at.port || strcmp(a.host, l->at.host) != 0) drop(&l->ctx);
    else l->last_used = mql_now_ms();
}

static redisContext *cluster_connect(void *arg, const char *host, int port, mql_result *res) {
    return mql_redis_link_connect(arg, host, port, 0, res);
}

redisReply *mql_redis_link_run(mql_redis_link *l, int argc, const char **argv,
                               const size_t *lens, int key_index, mql_result *res) {
    redisReply *reply;
    int tries;
    if (l->mode == MODE_CLUSTER)
        return mql_cluster_run(l->cluster, cluster_connect, l, argc, argv, lens, key_index, res);
    recheck_master(l);
    for (tries = 0; tries < 2; tries++) {
        if (connected(l, res) < 0) return NULL;
        reply = redisCommandArgv(l->ctx, argc, argv, lens);
        if (!reply) {   /* the command may have run: never send it again */
            transport_fail(l->ctx, res, argv[0]);
            drop(&l->ctx);
            return NULL;
        }
        if (l->mode == MODE_SENTINEL && reply->type == REDIS_REPLY_ERROR &&
            strncmp(reply->str, "READONLY", 8) == 0 && tries == 0) {
            freeReplyObject(reply);   /* a demoted master refused it: find the new one */
            drop(&l->ctx);
            continue;
        }
        break;
    }
    l->last_used = mql_now_ms();
    mql_result_ok(res);
    return reply;
}

/* ------------------------------------------------------------ pipelines */

static void fail_from(int from, int n, redisReply **replies, mql_result *res,
                      const mql_result *why) {
    int i;
    for (i = from; i < n; i++) {
        replies[i] = NULL;
        res[i] = *why;
    }
}

/* Bytes left in the reader after the last expected reply: the server sent
 * more than it was asked for, so no reply of this batch can be trusted to be
 * the answer to the command at its index. */
static int unread_bytes(const redisContext *ctx) {
    return ctx->reader && ctx->reader->len > ctx->reader->pos;
}

/* Writes the n commands (one write, at the first read) and reads n replies;
 * the round trips it took (0: none sent). */
static int pipeline(mql_redis_link *l, int n, const mql_redis_argv *cmds, redisReply **replies,
                    mql_result *res) {
    mql_result why;
    int i;
    if (connected(l, &why) < 0) {
        fail_from(0, n, replies, res, &why);
        return 0;
    }
    for (i = 0; i < n; i++)
        if (redisAppendCommandArgv(l->ctx, cmds[i].argc, cmds[i].argv, cmds[i].lens) != REDIS_OK)
            break;   /* out of memory: nothing was written yet */
    if (i < n) {
        transport_fail(l->ctx, &why, "pipeline");
        drop(&l->ctx);
        fail_from(0, n, replies, res, &why);
        return 0;
    }
    for (i = 0; i < n; i++) {
        void *reply = NULL;
        if (redisGetReply(l->ctx, &reply) != REDIS_OK || !reply) {
            /* this command and the ones after it may have run: never again */
            transport_fail(l->ctx, &why, cmds[i].argv[0]);
            drop(&l->ctx);
            fail_from(i, n, replies, res, &why);
            return 1;
        }
        replies[i] = reply;
        mql_result_ok(&res[i]);
    }
    if (unread_bytes(l->ctx)) {
        for (i = 0; i < n; i++) freeReplyObject(replies[i]);
        mql_result_fail(&why, "UNAVAILABLE", "redis: more replies than the %d commands sent", n);
        drop(&l->ctx);
        fail_from(0, n, replies, res, &why);
        return 1;
    }
    l->last_used = mql_now_ms();
    return 1;
}

static int is_readonly(const redisReply *reply) {
    return reply && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "READONLY", 8) == 0;
}

/* Sentinel: a READONLY reply came from a demoted master and proves its
 * command did not run; each such command runs once more on its own
 * (mql_redis_link_run). The batch's connection is dropped before the first,
 * which finds the new master; the others follow it there on the connection
 * it made: dropped again for each, a batch of k cost k sentinel questions and
 * k connections (AUTH, SELECT, ROLE each) to the one master. */
static int rerun_readonly(mql_redis_link *l, int n, const mql_redis_argv *cmds,
                          redisReply **replies, mql_result *res) {
    int i, trips = 0;
    if (l->mode != MODE_SENTINEL) return 0;
    for (i = 0; i < n; i++) {
        if (!is_readonly(replies[i])) continue;
        freeReplyObject(replies[i]);
        if (!trips) drop(&l->ctx);
        replies[i] = mql_redis_link_run(l, cmds[i].argc, cmds[i].argv, cmds[i].lens,
                                        cmds[i].key_index, &res[i]);
        trips++;
    }
    return trips;
}

int mql_redis_link_run_many(mql_redis_link *l, int n, const mql_redis_argv *cmds,
                            redisReply **replies, mql_result *res) {
    int i, trips;
    if (l->mode == MODE_CLUSTER || n == 1) {
        /* Cluster: the commands of a batch may belong to different nodes */
        for (i = 0; i < n; i++)
            replies[i] = mql_redis_link_run(l, cmds[i].argc, cmds[i].argv, cmds[i].lens,
                                            cmds[i].key_index, &res[i]);
        return n;
    }
    recheck_master(l);
    trips = pipeline(l, n, cmds, replies, res);
    return trips + rerun_readonly(l, n, cmds, replies, res);
}

void mql_redis_link_run_parallel(mql_redis_link *l, int n, const mql_redis_argv *cmds,
                                 redisReply **replies, mql_result *res) {
    if (l->mode == MODE_CLUSTER)
        mql_cluster_run_many(l->cluster, cluster_connect, l, l->timeout_ms, n, cmds, replies, res);
    else
        mql_redis_link_run_many(l, n, cmds, replies, res);
}
