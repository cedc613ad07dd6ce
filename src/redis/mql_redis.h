/* mql_redis.h -- a Redis client on threads of its own (hiredis), for locks and for Lua.
 *
 * The host queues commands and gets their replies as events on a descriptor,
 * exactly like mql_client: nothing here blocks the host or the gRPC thread.
 * A command thread owns one synchronous hiredis link and reconnects when it
 * breaks (every command tries once); a keepalive thread with a link of its
 * own keeps registered locks alive, earliest deadline first, so a lock
 * outlives neither its owner's death nor a busy Lua VM, and no queue of
 * commands delays its renewal.
 *
 * Scripts go as EVALSHA (the SHA1 computed here) with a fallback to EVAL when
 * the server answers NOSCRIPT, so each script crosses the wire once per server.
 */
#ifndef MQL_REDIS_H
#define MQL_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "mql_events.h"

typedef struct mql_redis_config {
    const char *host;            /* with port; or */
    int port;
    const char *unix_path;       /* a unix socket */
    const char *username;        /* ACL user for AUTH, if set (Redis 6+) */
    const char *password;        /* AUTH after each connect, if set */
    int db;                      /* SELECT after each connect, if > 0 */
    int64_t timeout_ms;          /* connect and command timeout */
    /* Sentinel: master names the monitored master, nodes are the sentinels.
     * Cluster: cluster != 0, nodes are seed nodes. Each node "host:port". */
    const char *master;
    const char *sentinel_username;   /* AUTH to the sentinels themselves, if set: */
    const char *sentinel_password;   /* their own requirepass / ACL, not the master's */
    int cluster;
    const char *const *nodes;
    int nnodes;
} mql_redis_config;

typedef struct mql_redis mql_redis;

mql_redis *mql_redis_new(const mql_redis_config *cfg, char *err, size_t errlen);
void mql_redis_free(mql_redis *r);
int mql_redis_fd(const mql_redis *r);
mql_event *mql_redis_take_events(mql_redis *r);
/* A hiredis reply, copied into the core's own form (what events carry to the
 * host). Exposed for the fuzzer that feeds it whatever a server could send. */
struct redisReply;
void mql_reply_copy(mql_reply *out, const struct redisReply *in);
void mql_redis_requeue_events(mql_redis *r, mql_event *list);   /* see mql_events_requeue */

/* A command built apart from its client, so that many can be queued in one
 * step (mql_redis_submit); the arguments are copied. */
typedef struct redis_cmd mql_redis_cmd;
mql_redis_cmd *mql_redis_cmd_new(int argc, const char **argv, const size_t *lens);
/* EVALSHA script (EVAL when the server answers NOSCRIPT), numkeys keys then
 * args; r only lends its cache of script SHA1s (call it from the host). */
mql_redis_cmd *mql_redis_cmd_eval(mql_redis *r, const char *script, int numkeys, int argc,
                                  const char **argv, const size_t *lens);
void mql_redis_cmd_free(mql_redis_cmd *cmd);   /* one never submitted */
/* Queues n commands together and takes them over; returns the op id of the
 * first, the others following it (first + i). Commands queued together reach
 * the server in one round trip (up to 128 of them; one server or Sentinel,
 * not Cluster), each with its own event, in order. */
uint64_t mql_redis_submit(mql_redis *r, mql_redis_cmd **cmds, int n);
/* Round trips and commands of the command link so far. */
void mql_redis_stats(mql_redis *r, uint64_t *round_trips, uint64_t *commands);

/* A command; the arguments are copied. Its event carries the reply. */
uint64_t mql_redis_command(mql_redis *r, int argc, const char **argv, const size_t *lens);
/* EVALSHA script (falls back to EVAL) with numkeys keys then args in argv. */
uint64_t mql_redis_eval(mql_redis *r, const char *script, int numkeys, int argc,
                        const char **argv, const size_t *lens);

/* Keeps key alive while its value is owner: every every_ms the thread runs a
 * compare-owner-then-PEXPIRE ttl_ms, for at most max_ms. since_ms is when the
 * command that set the key's TTL was sent (mql_now_ms time, taken before it;
 * 0: now): the TTL runs from there, not from this call, which may come much
 * later (the acquire's reply, then a busy host before it gets here), so the
 * renewals and the lapse count from it. A renewal that finds
 * the key gone or someone else's posts MQL_EV_LOCK_LOST with the id and stops;
 * one that gets no reply or an error reply (BUSY, LOADING, READONLY, ...) is
 * retried while the TTL may still run, and the lock is lost only once it has
 * not. Returns the keepalive id. */
uint64_t mql_redis_keepalive(mql_redis *r, const char *key, size_t key_len, const char *owner,
                             size_t owner_len, int64_t ttl_ms, int64_t every_ms, int64_t max_ms,
                             int64_t since_ms);
/* Stops a keepalive; returns 1 if the lock was lost: a renewal found it gone
 * or taken, or its TTL ran out since the last renewal that worked. */
int mql_redis_keepalive_stop(mql_redis *r, uint64_t id);
/* 1 if keepalive id is lost as keepalive_stop would say, without stopping it:
 * a renewal proved it gone, its budget is spent, or its TTL ran out since the
 * last good renewal (0 for an id it does not know). */
int mql_redis_keepalive_lost(mql_redis *r, uint64_t id);

#endif /* MQL_REDIS_H */
