/* redis_keepalive_test.c -- the client's record of its lock keepalives, found
 * by id however many there are and in whatever order they are stopped, no
 * server needed. Each keepalive here is registered as if its lock had been
 * taken ten seconds ago with a one-second TTL: it counts as lost at once (its
 * TTL ran out unrenewed), so keepalive_lost answers 1 for a keepalive the
 * client still knows and 0 for one it does not (never made, or stopped), and
 * that tells whether the lookup found it. Renewals are an hour or more
 * apart: the keepalive thread never runs one, and never needs the server.
 * Each is due at a different time, in an order unlike their registration's,
 * so stops take them from every place in the thread's due-order heap. One
 * test more runs renewals against a fake server on a unix socket. */
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mql.h"
#include "mql_redis.h"
#include "fake_unix.h"
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

/* ------------------------------------------------------------ a fake server */

/* A Redis on a unix socket that answers the first renewal it gets 1 (kept),
 * twice over, as no honest server does, and every later one 0 (the key is
 * gone). It counts the renewals it was sent. */
typedef struct fake {
    int listen_fd;
    char path[108];
    pthread_t thread;
    int renewals;   /* under mu */
    pthread_mutex_t mu;
} fake;

static void serve(fake *f, int fd) {
    redisReader *reader = redisReaderCreate();
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        void *req = NULL;
        redisReaderFeed(reader, buf, (size_t)n);
        while (redisReaderGetReply(reader, &req) == REDIS_OK && req) {
            int first;
            freeReplyObject(req);
            req = NULL;
            pthread_mutex_lock(&f->mu);
            first = f->renewals++ == 0;
            pthread_mutex_unlock(&f->mu);
            if (write(fd, first ? ":1\r\n:1\r\n" : ":0\r\n", first ? 8 : 4) < 0) n = 0;
        }
    }
    redisReaderFree(reader);
    close(fd);
}

static void *fake_main(void *arg) {
    fake *f = arg;
    int fd;
    while ((fd = accept(f->listen_fd, NULL, NULL)) >= 0) serve(f, fd);
    return NULL;
}

static void fake_start(fake *f) {
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    snprintf(f->path, sizeof(f->path), "/tmp/mql-keepalive-%d.sock", (int)getpid());
    f->listen_fd = fake_unix_listen(f->path);
    pthread_create(&f->thread, NULL, fake_main, f);
}

static void fake_stop(fake *f) {
    shutdown(f->listen_fd, SHUT_RDWR);
    pthread_join(f->thread, NULL);
    close(f->listen_fd);
    unlink(f->path);
    pthread_mutex_destroy(&f->mu);
}

/* 1 once the LOCK_LOST event of id is read (waits up to about 5 s). */
static int wait_lock_lost(mql_redis *r, uint64_t id) {
    for (int spins = 0; spins < 50; spins++) {
        struct pollfd p = {mql_redis_fd(r), POLLIN, 0};
        mql_event *ev, *next;
        int lost = 0;
        poll(&p, 1, 100);
        for (ev = mql_redis_take_events(r); ev; ev = next) {
            next = ev->next;
            if (ev->kind == MQL_EV_LOCK_LOST && ev->keepalive_id == id) lost = 1;
            ev->next = NULL;
            mql_event_free(ev);
        }
        if (lost) return 1;
    }
    return 0;
}

/* The first renewal is answered twice: the spare "kept" must not stand as the
 * second renewal's answer. The second renewal itself finds the key gone and
 * the lock is lost then -- not one renewal later, after a third was sent,
 * with keepalive_lost saying kept all the while. */
static void a_renewal_answered_twice_reports_no_lock_kept(void) {
    mql_redis_config cfg;
    char err[128];
    fake f;
    mql_redis *r;
    uint64_t id;
    int renewals;
    fake_start(&f);
    memset(&cfg, 0, sizeof(cfg));
    cfg.unix_path = f.path;
    cfg.timeout_ms = 2000;
    r = mql_redis_new(&cfg, err, sizeof(err));
    /* a TTL long enough that only a renewal's answer can make it lost */
    id = mql_redis_keepalive(r, "lock:a", 6, "me", 2, 60000, 50, 0, 0);
    CHECK(wait_lock_lost(r, id));
    CHECK(mql_redis_keepalive_lost(r, id) == 1);
    usleep(200 * 1000);   /* a lost lock is renewed no more: the count is final */
    pthread_mutex_lock(&f.mu);
    renewals = f.renewals;
    pthread_mutex_unlock(&f.mu);
    CHECK(renewals == 2);
    if (renewals != 2) fprintf(stderr, "  renewals sent before the loss: %d\n", renewals);
    CHECK(mql_redis_keepalive_stop(r, id) == 1);
    mql_redis_free(r);
    fake_stop(&f);
}

int main(void) {
    RUN(every_keepalive_is_found_until_stopped_in_any_order);
    RUN(a_sliding_window_of_keepalives_stays_found);
    RUN(a_renewal_answered_twice_reports_no_lock_kept);
    return TEST_REPORT("redis_keepalive");
}
