/* redis_sentinel_test.c -- the Sentinel link against fake sentinels and fake
 * Redis nodes on loopback TCP (the link dials host:port), no server needed.
 * A sentinel whose answer cannot be used -- an empty address, a port out of
 * range, an address where nothing listens, a node whose ROLE is not master
 * (a sentinel that lags a failover) -- costs the client that sentinel only:
 * it asks the next, as the "Sentinel clients guidelines" have it for a
 * sentinel that cannot be reached or does not know the master. A master
 * that refuses ROLE (an ACL user without +role) is a configuration to fix,
 * not a master that is "not a master yet". */
#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mql.h"
#include "mql_redis.h"
#include "mql_redis_link.h"
#include "mql_test.h"

/* A fake on 127.0.0.1: a sentinel answers every command with `answer`; a
 * node answers ROLE with `answer`, QUIT with +OK and a hang-up (as Redis
 * does), anything else with its last argument. It serves one connection at
 * a time, as the link opens them. */
typedef struct fake {
    int listen_fd;
    int port;
    int sentinel;
    int asked;   /* connections served */
    int quits;   /* connections closed by a QUIT */
    int readonly;   /* a node demoted under the client: READONLY to all but ROLE */
    char answer[256];
    char later[256];   /* a sentinel's answer from its second connection on, if set */
    pthread_t thread;
} fake;

static void reply_to(const fake *f, const redisReply *req, char *out, size_t outlen) {
    const redisReply *last = req->element[req->elements - 1];
    if (f->sentinel && f->later[0] && __atomic_load_n(&f->asked, __ATOMIC_SEQ_CST) > 1)
        snprintf(out, outlen, "%s", f->later);
    else if (f->sentinel || strcasecmp(req->element[0]->str, "ROLE") == 0)
        snprintf(out, outlen, "%s", f->answer);
    else if (f->readonly)
        snprintf(out, outlen, "-READONLY You can't write against a read only replica.\r\n");
    else if (strcasecmp(req->element[0]->str, "QUIT") == 0)
        snprintf(out, outlen, "+OK\r\n");
    else
        snprintf(out, outlen, "$%zu\r\n%s\r\n", last->len, last->str);
}

static void serve(fake *f, int fd) {
    redisReader *reader = redisReaderCreate();
    char buf[4096];
    ssize_t n;
    int open = 1;
    while (open && (n = read(fd, buf, sizeof(buf))) > 0) {
        void *req = NULL;
        redisReaderFeed(reader, buf, (size_t)n);
        while (redisReaderGetReply(reader, &req) == REDIS_OK && req) {
            char out[512];
            reply_to(f, req, out, sizeof(out));
            freeReplyObject(req);
            req = NULL;
            if (write(fd, out, strlen(out)) < 0) open = 0;
            if (strcmp(out, "+OK\r\n") == 0) open = 0;
        }
    }
    redisReaderFree(reader);
    close(fd);
    if (!open) __atomic_add_fetch(&f->quits, 1, __ATOMIC_SEQ_CST);
}

static void *fake_main(void *arg) {
    fake *f = arg;
    int fd;
    while ((fd = accept(f->listen_fd, NULL, NULL)) >= 0) {
        __atomic_add_fetch(&f->asked, 1, __ATOMIC_SEQ_CST);
        serve(f, fd);
    }
    return NULL;
}

/* A TCP socket bound to a free loopback port; listening if listen_too. */
static int bound_socket(int *port, int listen_too) {
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    if (listen_too) CHECK(listen(fd, 4) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static void fake_start(fake *f, int sentinel, const char *answer) {
    memset(f, 0, sizeof(*f));
    f->sentinel = sentinel;
    snprintf(f->answer, sizeof(f->answer), "%s", answer);
    f->listen_fd = bound_socket(&f->port, 1);
    pthread_create(&f->thread, NULL, fake_main, f);
}

static void fake_stop(fake *f) {
    shutdown(f->listen_fd, SHUT_RDWR);   /* ends accept() */
    pthread_join(f->thread, NULL);
    close(f->listen_fd);
}

/* A sentinel's answer naming host:port (port as text, to send garbage). */
static void named(char *out, size_t outlen, const char *host, const char *port) {
    snprintf(out, outlen, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(host), host, strlen(port),
             port);
}

static void named_port(char *out, size_t outlen, const char *host, int port) {
    char p[16];
    snprintf(p, sizeof(p), "%d", port);
    named(out, outlen, host, p);
}

static mql_redis_link *link_to(const fake *s1, const fake *s2) {
    char a[2][32];
    const char *nodes[2] = {a[0], a[1]};
    mql_redis_config cfg;
    snprintf(a[0], sizeof(a[0]), "127.0.0.1:%d", s1->port);
    snprintf(a[1], sizeof(a[1]), "127.0.0.1:%d", s2->port);
    memset(&cfg, 0, sizeof(cfg));
    cfg.master = "mymaster";
    cfg.nodes = nodes;
    cfg.nnodes = 2;
    cfg.timeout_ms = 2000;
    return mql_redis_link_new(&cfg);
}

/* ECHO hi through the link: 1 if the master echoed it, else the failure in res. */
static int echo_hi(mql_redis_link *l, mql_result *res) {
    const char *argv[2] = {"ECHO", "hi"};
    size_t lens[2] = {4, 2};
    redisReply *reply = mql_redis_link_run(l, 2, argv, lens, 1, res);
    int ok = reply && reply->type == REDIS_REPLY_STRING && strcmp(reply->str, "hi") == 0;
    if (!ok) fprintf(stderr, "  echo: %s %s\n", res->code, res->msg);
    if (reply) freeReplyObject(reply);
    return ok;
}

/* The first sentinel answers first_answer; the second names the master. The
 * command must reach the master, and the next connection must start from the
 * second sentinel (the one whose answer led to a master). */
static void check_first_is_skipped(const char *first_answer) {
    fake master, s1, s2;
    char good[128];
    mql_result res;
    mql_redis_link *l;
    fake_start(&master, 0, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
    named_port(good, sizeof(good), "127.0.0.1", master.port);
    fake_start(&s1, 1, first_answer);
    fake_start(&s2, 1, good);
    l = link_to(&s1, &s2);
    CHECK(echo_hi(l, &res));
    mql_redis_link_free(l);
    fake_stop(&s1);
    fake_stop(&s2);
    fake_stop(&master);
}

static void test_empty_address_asks_the_next_sentinel(void) {
    char answer[128];
    named(answer, sizeof(answer), "", "6379");
    check_first_is_skipped(answer);
}

static void test_port_out_of_range_asks_the_next_sentinel(void) {
    char answer[128];
    named(answer, sizeof(answer), "127.0.0.1", "70000");
    check_first_is_skipped(answer);
}

static void test_dead_master_named_asks_the_next_sentinel(void) {
    char answer[128];
    int port, fd = bound_socket(&port, 0);   /* bound, never listening: refuses */
    named_port(answer, sizeof(answer), "127.0.0.1", port);
    check_first_is_skipped(answer);
    close(fd);
}

/* A sentinel that lags a failover names the old master, now a replica. */
static void test_replica_named_asks_the_next_sentinel(void) {
    fake replica;
    char answer[128];
    fake_start(&replica, 0, "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:1\r\n");
    named_port(answer, sizeof(answer), "127.0.0.1", replica.port);
    check_first_is_skipped(answer);
    fake_stop(&replica);
}

/* Once the second sentinel led to the master, the reconnect after the
 * master hung up asks it first: the first one (naming a replica) is not
 * asked again, nor the replica dialled again. */
static void test_the_sentinel_that_led_to_the_master_is_asked_first(void) {
    fake master, replica, s1, s2;
    char stale[128], good[128];
    const char *quit[1] = {"QUIT"};
    size_t quit_len[1] = {4};
    mql_result res;
    mql_redis_link *l;
    redisReply *reply;
    fake_start(&master, 0, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
    fake_start(&replica, 0, "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:1\r\n");
    named_port(stale, sizeof(stale), "127.0.0.1", replica.port);
    named_port(good, sizeof(good), "127.0.0.1", master.port);
    fake_start(&s1, 1, stale);
    fake_start(&s2, 1, good);
    l = link_to(&s1, &s2);
    CHECK(echo_hi(l, &res));
    reply = mql_redis_link_run(l, 1, quit, quit_len, 0, &res);
    CHECK(reply != NULL);
    if (reply) {   /* it reached the master, which hangs up */
        freeReplyObject(reply);
        /* the hang-up is on its way before the next command looks */
        while (__atomic_load_n(&master.quits, __ATOMIC_SEQ_CST) == 0) sched_yield();
    }
    CHECK(echo_hi(l, &res));
    CHECK(__atomic_load_n(&s1.asked, __ATOMIC_SEQ_CST) == 1);
    CHECK(__atomic_load_n(&replica.asked, __ATOMIC_SEQ_CST) == 1);
    CHECK(__atomic_load_n(&master.asked, __ATOMIC_SEQ_CST) == 2);
    mql_redis_link_free(l);
    fake_stop(&s1);
    fake_stop(&s2);
    fake_stop(&master);
    fake_stop(&replica);
}

/* A batch sent to a master demoted under the client: every command of it is
 * answered READONLY (none ran) and runs again on the master the sentinels
 * name now. The first rerun finds that master; the others follow it there on
 * the same connection. Each rerun dropped the connection the one before it
 * had just made and asked the sentinels again: a keepalive round of 128
 * renewals after a failover made 128 connections to a sentinel and 128 to
 * the new master (AUTH, SELECT, ROLE each) before the next round. */
static void test_a_batch_refused_readonly_finds_the_new_master_once(void) {
    enum { N = 8 };
    fake old, fresh, s1, s2;
    char first[128], now[128];
    const char *argv[N][2];
    size_t lens[N][2];
    char v[N][16];
    mql_redis_argv cmds[N];
    redisReply *replies[N];
    mql_result res[N];
    mql_redis_link *l;
    fake_start(&old, 0, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");   /* master when connected */
    old.readonly = 1;                                              /* and demoted since */
    fake_start(&fresh, 0, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
    named_port(first, sizeof(first), "127.0.0.1", old.port);
    named_port(now, sizeof(now), "127.0.0.1", fresh.port);
    fake_start(&s1, 1, first);
    snprintf(s1.later, sizeof(s1.later), "%s", now);   /* the failover, as s1 sees it next */
    fake_start(&s2, 1, now);
    l = link_to(&s1, &s2);
    for (int i = 0; i < N; i++) {
        snprintf(v[i], sizeof(v[i]), "v%d", i);
        argv[i][0] = "ECHO";
        argv[i][1] = v[i];
        lens[i][0] = 4;
        lens[i][1] = strlen(v[i]);
        cmds[i] = (mql_redis_argv){2, argv[i], lens[i], 1};
    }
    mql_redis_link_run_many(l, N, cmds, replies, res);
    for (int i = 0; i < N; i++) {   /* each its own answer, from the new master */
        CHECK(res[i].ok && replies[i] && replies[i]->type == REDIS_REPLY_STRING &&
              strcmp(replies[i]->str, v[i]) == 0);
        if (replies[i]) freeReplyObject(replies[i]);
    }
    CHECK(__atomic_load_n(&s1.asked, __ATOMIC_SEQ_CST) == 2);      /* the first connect, then once */
    CHECK(__atomic_load_n(&fresh.asked, __ATOMIC_SEQ_CST) == 1);   /* one connection for all */
    if (__atomic_load_n(&fresh.asked, __ATOMIC_SEQ_CST) != 1)
        fprintf(stderr, "  sentinel asked %d times, new master connected %d times\n",
                __atomic_load_n(&s1.asked, __ATOMIC_SEQ_CST),
                __atomic_load_n(&fresh.asked, __ATOMIC_SEQ_CST));
    mql_redis_link_free(l);
    fake_stop(&s1);
    fake_stop(&s2);
    fake_stop(&old);
    fake_stop(&fresh);
}

/* ROLE is in @admin and @dangerous: a master user with -@dangerous gets
 * NOPERM for it. That is a configuration to fix (REDIS_AUTH), and the error
 * says what the server answered, not that the master is no master. */
static void test_role_refused_is_an_auth_failure(void) {
    fake master, s1, s2;
    char good[128];
    mql_result res;
    mql_redis_link *l;
    fake_start(&master, 0, "-NOPERM this user has no permissions to run the 'role' command\r\n");
    named_port(good, sizeof(good), "127.0.0.1", master.port);
    fake_start(&s1, 1, good);
    fake_start(&s2, 1, good);
    l = link_to(&s1, &s2);
    CHECK(!echo_hi(l, &res));
    CHECK(strcmp(res.code, "REDIS_AUTH") == 0);
    CHECK(strstr(res.msg, "NOPERM") != NULL);
    mql_redis_link_free(l);
    fake_stop(&s1);
    fake_stop(&s2);
    fake_stop(&master);
}

int main(void) {
    RUN(test_empty_address_asks_the_next_sentinel);
    RUN(test_port_out_of_range_asks_the_next_sentinel);
    RUN(test_dead_master_named_asks_the_next_sentinel);
    RUN(test_replica_named_asks_the_next_sentinel);
    RUN(test_the_sentinel_that_led_to_the_master_is_asked_first);
    RUN(test_role_refused_is_an_auth_failure);
    RUN(test_a_batch_refused_readonly_finds_the_new_master_once);
    return TEST_REPORT("redis_sentinel_test");
}
