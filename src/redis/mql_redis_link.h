/* mql_redis_link.h -- one thread's way to a Redis deployment.
 *
 * A link hides where a command goes: one server (host:port or a unix
 * socket), the master that Sentinel names, or the Cluster node that owns the
 * command's slot. It connects lazily, authenticates (AUTH [user] password),
 * selects the db, and drops a broken connection so that the next command
 * connects again, as it does one with bytes no command asked for waiting on
 * it (mql_redis_ctx_in_step). It never sends a command twice after a
 * transport failure: only replies that prove the command did not run (MOVED,
 * ASK, READONLY) are followed by a second try elsewhere. One link belongs to one thread.
 */
#ifndef MQL_REDIS_LINK_H
#define MQL_REDIS_LINK_H

#include <hiredis/hiredis.h>

#include "mql.h"
#include "mql_redis.h"

typedef struct mql_redis_link mql_redis_link;

/* Copies what it needs from cfg. */
mql_redis_link *mql_redis_link_new(const mql_redis_config *cfg);
void mql_redis_link_free(mql_redis_link *l);

/* Runs one command. key is argv[key_index] (0: the command has no key), used
 * to pick a Cluster slot. Returns the reply, or NULL with res set (TIMEOUT,
 * UNAVAILABLE, REDIS_AUTH, ...). */
redisReply *mql_redis_link_run(mql_redis_link *l, int argc, const char **argv,
                               const size_t *lens, int key_index, mql_result *res);

/* One command of a pipeline: argv as for mql_redis_link_run. */
typedef struct mql_redis_argv {
    int argc;
    const char **argv;
    const size_t *lens;
    int key_index;
} mql_redis_argv;

/* Runs n commands, in order, and returns how many round trips that took.
 * One server or Sentinel: all n are written at once and the n replies read
 * back in order, one round trip for the lot (a READONLY reply, which proves
 * its command did not run, re-runs that command alone on the new master).
 * Cluster: one command after another, as mql_redis_link_run. replies[i] is
 * command i's reply, or NULL with res[i] set: a transport failure fails the
 * command whose reply it cut and every one after it (each may have run: none
 * is sent again), and a reply more than the commands sent is a protocol error
 * that fails all n, since it proves the replies cannot be matched to them. */
int mql_redis_link_run_many(mql_redis_link *l, int n, const mql_redis_argv *cmds,
                            redisReply **replies, mql_result *res);

/* Runs n commands as mql_redis_link_run_many does, but under Cluster every
 * node's share goes out at once, one pipeline a node, and the replies of all
 * nodes are read together with one deadline (mql_cluster_run_many): a node
 * that does not answer delays no command to another. The lock keepalive's. */
void mql_redis_link_run_parallel(mql_redis_link *l, int n, const mql_redis_argv *cmds,
                                 redisReply **replies, mql_result *res);

/* 1 if ctx can take a command whose reply will be its own: nothing is left to
 * read, neither in hiredis' buffer nor on the socket. Else the connection is
 * out of step and must be made again before anything is sent on it (nothing
 * of ours is in flight on it, so that runs no command twice). Shared by the
 * Cluster code, whose node connections are kept the same way. */
int mql_redis_ctx_in_step(const redisContext *ctx);

/* Connects to host:port (a unix socket when port is 0) and authenticates;
 * NULL with res set on failure. Shared by the Sentinel and Cluster code. */
redisContext *mql_redis_link_connect(const mql_redis_link *l, const char *host, int port,
                                     int select_db, mql_result *res);

#endif /* MQL_REDIS_LINK_H */
