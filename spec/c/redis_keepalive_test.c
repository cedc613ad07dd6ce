/* redis_keepalive_test.c -- the client's record of its lock keepalives, found
 * by id however many there are and in whatever order they are stopped, no
 * server needed. Each keepalive here is registered as if its lock had been
 * taken ten seconds ago with a one-second TTL: it counts as lost at once (its
 * TTL ran out unrenewed), so keepalive_lost answers 1 for a keepalive the
 * client still knows and 0 for one it does not (never made, or stopped), and
 * that tells whether the lookup found it. Renewals are an hour or more
 * apart: the keepalive thread never runs one, and never needs the server.
 * Each is due at a different time, in an order unlike their registration's,
 * so stops take them from every place in the thread's due-order heap. */
#include <stdint.h>
#include <string.h>

#include "mql.h"
#include "mql_redis.h"
#include "mql_test.h"

static mql_redis *client(void) {
    mql_redis_config cfg;
    char err[128];
    memset(&cfg, 0, sizeof(cfg));
    cfg.unix_path = "/nonexistent/mqlease-keepalive-test.sock";
    cfg.timeout_ms = 200;
    return mql_redis_new(&cfg, err, sizeof(err));
}

static uint64_t register_one(mql_redis *r, int i) {
    char key[32];
    snprintf(key, sizeof(key), "lock:%d", i);
    int64_t every_ms = 3600 * 1000 + (int64_t)((unsigned)i * 7919u % 100000u);
    return mql_redis_keepalive(r, key, strlen(key), "me", 2, 1000, every_ms, 0, mql_now_ms() - 10000);
}

/* A small deterministic generator, so a failure replays. */
static uint32_t next_rand(uint32_t *s) {
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

static void every_keepalive_is_found_until_stopped_in_any_order(void) {
    enum { N = 3000 };
    static uint64_t ids[N];
    static int order[N];
    uint32_t seed = 7;
    mql_redis *r = client();
    CHECK(r != NULL);
    if (!r) return;
    for (int i = 0; i < N; i++) {
        ids[i] = register_one(r, i);
        order[i] = i;
    }
    for (int i = N - 1; i > 0; i--) {   /* a shuffled order of stops */
        int j = (int)(next_rand(&seed) % (uint32_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < N; i++) CHECK(mql_redis_keepalive_lost(r, ids[i]) == 1);
    for (int n = 0; n < N; n++) {
        int i = order[n];
        CHECK(mql_redis_keepalive_stop(r, ids[i]) == 1);   /* found: its TTL ran out */
        CHECK(mql_redis_keepalive_lost(r, ids[i]) == 0);   /* gone from the record */
        CHECK(mql_redis_keepalive_stop(r, ids[i]) == 0);   /* a second stop finds nothing */
        /* every one not yet stopped is still found (checked at a few points) */
        if (n % 500 == 0)
            for (int m = n + 1; m < N; m++) CHECK(mql_redis_keepalive_lost(r, ids[order[m]]) == 1);
    }
    CHECK(mql_redis_keepalive_lost(r, ids[N - 1] + 1000) == 0);   /* never made */
    mql_redis_free(r);
}

/* The exactly-once policy's pattern: a few hundred live, the oldest stopped
 * as new ones come, for many times the table's size. */
static void a_sliding_window_of_keepalives_stays_found(void) {
    enum { LIVE = 300, TOTAL = 20000 };
    static uint64_t ids[TOTAL];
    mql_redis *r = client();
    CHECK(r != NULL);
    if (!r) return;
    for (int i = 0; i < TOTAL; i++) {
        ids[i] = register_one(r, i);
        if (i >= LIVE) {
            CHECK(mql_redis_keepalive_stop(r, ids[i - LIVE]) == 1);
            CHECK(mql_redis_keepalive_lost(r, ids[i - LIVE + 1]) == 1);
            CHECK(mql_redis_keepalive_lost(r, ids[i]) == 1);
        }
    }
    for (int i = TOTAL - LIVE; i < TOTAL; i++) CHECK(mql_redis_keepalive_stop(r, ids[i]) == 1);
    mql_redis_free(r);
}

int main(void) {
    RUN(every_keepalive_is_found_until_stopped_in_any_order);
    RUN(a_sliding_window_of_keepalives_stays_found);
    return TEST_REPORT("redis_keepalive");
}
