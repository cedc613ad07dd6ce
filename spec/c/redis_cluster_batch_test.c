/* redis_cluster_batch_test.c -- the command thread's batches under Redis
 * Cluster when one node goes silent: it takes connections and reads commands
 * but never answers (a frozen process, a blackholed route), so a command to
 * it ends only at the client's timeout. The commands of the same batch to the
 * other nodes must not wait for that timeout, and the silent node's must not
 * cost one timeout each: sent one after another, a batch with k commands for
 * that node held every command behind them (the acquires and done markers of
 * messages whose keys live on healthy nodes) and the client's close for k
 * timeouts.
 *
 * Two fake nodes on loopback TCP (tcp_node_fake.h): "a" answers, "b" does
 * not. No wall time is asserted: the client closes its connection to "b"
 * only when its wait for a reply ends, so a command logged by "a" before that
 * close was sent while "b" was still being waited for. */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mql.h"
#include "mql_redis.h"
#include "mql_redis_cluster.h"
#include "mql_test.h"
#include "tcp_node_fake.h"

enum { NCMDS = 8 };

/* Waits for the events of ops first .. first + n - 1 (a bound of about 20 s
 * only keeps a broken build from hanging) and files them by op - first. */
static int collect(mql_redis *r, uint64_t first, int n, mql_event **by_index) {
    int got = 0;
    for (int spins = 0; got < n && spins < 200; spins++) {
        struct pollfd p = {mql_redis_fd(r), POLLIN, 0};
        mql_event *ev, *next;
        poll(&p, 1, 100);
        for (ev = mql_redis_take_events(r); ev; ev = next) {
            next = ev->next;
            ev->next = NULL;
            if (ev->kind == MQL_EV_OP && ev->op >= first && ev->op < first + (uint64_t)n &&
                !by_index[ev->op - first]) {
                by_index[ev->op - first] = ev;
                got++;
            } else {
                mql_event_free(ev);
            }
        }
    }
    return got;
}

/* Queues SET key v for NCMDS keys in one step, b's key first, then a's, in turn. */
static uint64_t submit_alternating(mql_redis *r, const char *key_b, const char *key_a) {
    mql_redis_cmd *cmds[NCMDS];
    for (int i = 0; i < NCMDS; i++) {
        const char *key = i % 2 == 0 ? key_b : key_a;
        const char *argv[3] = {"SET", key, "v"};
        size_t lens[3] = {3, strlen(key), 1};
        cmds[i] = mql_redis_cmd_new(3, argv, lens);
    }
    return mql_redis_submit(r, cmds, NCMDS);
}

/* Node b serves slots 0-8191, a the rest and is the seed. */
static void a_silent_node_delays_no_command_of_the_batch_on_another(void) {
    shared_log log;
    node a, b;
    char slots[256], seed[32], key_a[32], key_b[32], err[128];
    const char *seeds[1] = {seed};
    mql_event *evs[NCMDS] = {0};
    mql_redis_config cfg;
    mql_redis *r;
    uint64_t first;
    int failed_before = mql_test_failed_checks;
    memset(&log, 0, sizeof(log));
    pthread_mutex_init(&log.mu, NULL);
    node_start(&a, 'a', 0, &log);
    node_start(&b, 'b', 1, &log);
    snprintf(slots, sizeof(slots),
             "*2\r\n*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$2\r\nib\r\n"
             "*3\r\n:8192\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$2\r\nia\r\n",
             b.port, a.port);
    log.slots = slots;
    snprintf(seed, sizeof(seed), "127.0.0.1:%d", a.port);
    key_in(key_b, sizeof(key_b), 0, 8191);
    key_in(key_a, sizeof(key_a), 8192, 16383);
    memset(&cfg, 0, sizeof(cfg));
    cfg.cluster = 1;
    cfg.nodes = seeds;
    cfg.nnodes = 1;
    cfg.timeout_ms = 1000;   /* b's wait: long beside a loopback round trip, even under ASan */
    r = mql_redis_new(&cfg, err, sizeof(err));
    CHECK(r != NULL);
    if (!r) return;
    first = submit_alternating(r, key_b, key_a);
    CHECK(collect(r, first, NCMDS, evs) == NCMDS);   /* each command answered, none lost */
    for (int i = 0; i < NCMDS; i++) {
        if (i % 2) {   /* a's: its own reply */
            CHECK(evs[i] && evs[i]->result.ok && evs[i]->reply &&
                  evs[i]->reply->type == MQL_REPLY_STATUS && strcmp(evs[i]->reply->str, "OK") == 0);
        } else {       /* b's: no reply, so it may have run: TIMEOUT, never sent again */
            CHECK(evs[i] && !evs[i]->result.ok && !evs[i]->reply &&
                  strcmp(evs[i]->result.code, "TIMEOUT") == 0);
        }
    }
    pthread_mutex_lock(&log.mu);
    /* every command of a's went out while b's first was still waited for */
    CHECK(nth_at(log.text, "a:SET", NCMDS / 2) < nth_at(log.text, "b:closed", 1));
    /* and b's commands cost the batch one wait, not one each */
    CHECK(nth_at(log.text, "b:SET", NCMDS / 2) < nth_at(log.text, "b:closed", 1));
    if (mql_test_failed_checks != failed_before) fprintf(stderr, "  log: %s\n", log.text);
    pthread_mutex_unlock(&log.mu);
    for (int i = 0; i < NCMDS; i++) mql_event_free(evs[i]);
    mql_redis_free(r);
    node_stop(&a);
    node_stop(&b);
    pthread_mutex_destroy(&log.mu);
}

int main(void) {
    RUN(a_silent_node_delays_no_command_of_the_batch_on_another);
    return TEST_REPORT("redis_cluster_batch");
}
