/* mql_redis_private.h -- what the command thread (mql_redis.c) and the
 * keepalive thread (mql_redis_keepalive.c) share: the client struct, under one
 * mutex, and the helpers both use. Not for use outside src/redis.
 */
#ifndef MQL_REDIS_PRIVATE_H
#define MQL_REDIS_PRIVATE_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdint.h>

#include "mql.h"
#include "mql_redis.h"
#include "mql_redis_link.h"

/* Commands per round trip: bounds the thread's arrays and how long the last
 * command of a batch waits behind the first. */
#define PIPELINE_MAX 128
#define SHA_CACHE 4

#define RENEW_SCRIPT                                                         \
    "if redis.call('get', KEYS[1]) == ARGV[1] then "                        \
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"

/* A script's text and SHA1, shared by the host's cache and every command
 * queued with it: the text is needed only when a server answers NOSCRIPT, so
 * a command holds a reference instead of a copy. Counted atomically, because
 * the command thread drops a command's reference while the host may evict
 * the cache's. */
typedef struct redis_script {
    int refs;
    char sha[41];
    size_t len;
    char text[];
} redis_script;

/* One allocation per command: argv and lens point into the same block, and
 * so do the arguments' bytes (argv[0] "EVALSHA" is static and an EVALSHA's
 * argv[1] is its script's SHA1). Built by the host, freed by the command
 * thread: a dozen small blocks a command, each freed on another thread than
 * made it, kept glibc's arena locks busy. */
typedef struct redis_cmd {
    struct redis_cmd *next;
    uint64_t op;
    int argc;
    char **argv;
    size_t *lens;
    redis_script *script;    /* non-NULL: an EVALSHA of that script */
} redis_cmd;

enum { KA_ACTIVE, KA_LOST, KA_SPENT };
#define KA_NOT_DUE ((size_t)-1)   /* keepalive.heap_at of one not waiting for a renewal */

typedef struct keepalive {
    struct keepalive *next, *prev;   /* the client's list of them (alive) */
    uint64_t id;
    char *key, *owner;
    size_t key_len, owner_len;   /* binary-safe: either may hold a NUL */
    int64_t ttl_ms, every_ms;
    int64_t next_at;         /* monotonic ms of the next renewal */
    int64_t until;           /* stop renewing after this */
    int64_t last_ok;         /* the key cannot outlive last_ok + ttl */
    int state;               /* KA_*: only KA_ACTIVE ones are renewed */
    int busy;                /* being renewed with the lock dropped */
    size_t heap_at;          /* its place in the client's ka_heap, or KA_NOT_DUE */
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
    /* The same keepalives by id (open addressing, at most half full): the
     * exactly-once policy asks about and stops a lock for every message, the
     * oldest of hundreds first, and a walk of the list for each cost a tenth
     * of the policy's CPU. */
    keepalive **ka_index;
    size_t ka_cap, ka_count;
    /* The active keepalives not being renewed, a min-heap by next_at: the
     * thread found its next renewal by walking every lock, and with tens of
     * thousands held a round of renewals took longer than their TTL. */
    keepalive **ka_heap;
    size_t ka_heap_len, ka_heap_cap;
    /* When the keepalive thread sleeps until (INT64_MIN while it is awake, and
     * will look at the list again anyway): a new lock due later than that
     * needs no wake-up. Waking it for each of thousands of locks a second,
     * each due lock_ttl/3 later, cost a context switch per message. */
    int64_t ka_wake_at;
    uint64_t next_op;
    mql_events events;
    mql_redis_link *cmd_link;   /* the command thread's own */
    mql_redis_link *ka_link;    /* the keepalive thread's own */
    char renew_sha[41];
    uint64_t round_trips, commands;   /* the command link's, for mql_redis_stats */
    /* The SHA1s of the last scripts evaluated: a policy sends the same two or
     * three scripts for every message, and hashing each again (OpenSSL 3
     * fetches the digest anew on every EVP_Digest) cost more than the Lua
     * around it. Touched only by the host, which builds the commands. */
    redis_script *sha_cache[SHA_CACHE];
    int sha_next;
};

/* Waits on cond (a CLOCK_MONOTONIC one) until woken or the monotonic ms when. */
void mql_redis_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t when);
/* The keepalive thread (mql_redis_keepalive.c) and its records. */
void *mql_redis_ka_thread_main(void *arg);
void mql_redis_keepalive_free(keepalive *k);

#endif
