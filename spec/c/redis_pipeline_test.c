/* redis_pipeline_test.c -- the command thread's pipelines against a fake Redis
 * on a unix socket, no server needed: commands queued together cross in one
 * round trip and each gets its own reply, in order; a server that dies after
 * part of the replies fails the rest (none lost, none shifted); a server that
 * sends more replies than commands fails the whole batch; NOSCRIPT replies
 * re-run as EVAL, with their own script's text even when the client's cache of
 * scripts dropped it while they were queued; a reply sent twice is never
 * taken for a later command's, and a connection the server closed while idle
 * fails no command. The fake parses requests with hiredis' own reader. */
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mql.h"
#include "mql_redis.h"
#include "fake_unix.h"
#include "mql_test.h"

enum { ECHO, CUT, EXTRA, SCRIPTS, TWICE, IDLE_CLOSE };

/* IDLE_CLOSE: how long a connection may stay idle before the fake closes it,
 * as a Redis with `timeout` set (or a proxy) does. */
#define IDLE_MS 30

typedef struct fake {
    int listen_fd;
    int mode;
    int expect;        /* CUT/EXTRA: commands to read before answering */
    int answer;        /* CUT: replies sent before the connection is closed */
    char path[108];
    pthread_t thread;
} fake;

/* The reply to one request: its last argument as a bulk string (SCRIPTS: an
 * EVAL's script); an EVALSHA is refused with NOSCRIPT, as a server that never
 * saw the script does. */
static void reply_to(const fake *f, const redisReply *req, char *out, size_t outlen) {
    const redisReply *last = req->element[req->elements - 1];
    if (f->mode == SCRIPTS && strcasecmp(req->element[0]->str, "EVAL") == 0) last = req->element[1];
    if (strcasecmp(req->element[0]->str, "EVALSHA") == 0) {
        snprintf(out, outlen, "-NOSCRIPT No matching script\r\n");
        return;
    }
    snprintf(out, outlen, "$%zu\r\n%s\r\n", last->len, last->str);
}

/* IDLE_CLOSE: 1 once fd stayed IDLE_MS without a request (the fake hangs up). */
static int idle_too_long(const fake *f, int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    return f->mode == IDLE_CLOSE && poll(&p, 1, IDLE_MS) == 0;
}

/* Serves one connection until the client closes it, or CUT/EXTRA are done.
 * TWICE answers the connection's first request twice, in one write, as no
 * honest server does; IDLE_CLOSE closes a connection left idle. */
static void serve(fake *f, int fd) {
    redisReader *reader = redisReaderCreate();
    char buf[4096], batch[8192] = "";
    int seen = 0, done = 0;
    ssize_t n;
    while (!done && !idle_too_long(f, fd) && (n = read(fd, buf, sizeof(buf))) > 0) {
        void *req = NULL;
        redisReaderFeed(reader, buf, (size_t)n);
        while (redisReaderGetReply(reader, &req) == REDIS_OK && req) {
            char one[256];
            reply_to(f, req, one, sizeof(one));
            freeReplyObject(req);
            req = NULL;
            seen++;
            if (f->mode == TWICE && seen == 1) {
                char two[512];
                snprintf(two, sizeof(two), "%s%s", one, one);
                if (write(fd, two, strlen(two)) < 0) done = 1;
            } else if (f->mode == ECHO || f->mode == SCRIPTS || f->mode == TWICE ||
                       f->mode == IDLE_CLOSE) {
                if (write(fd, one, strlen(one)) < 0) done = 1;
            } else if (f->mode == EXTRA || seen <= f->answer) {
                strncat(batch, one, sizeof(batch) - strlen(batch) - 1);
            }
        }
        if ((f->mode == CUT || f->mode == EXTRA) && seen >= f->expect) {
            if (f->mode == EXTRA) strncat(batch, "+SURPLUS\r\n", sizeof(batch) - strlen(batch) - 1);
            if (write(fd, batch, strlen(batch)) < 0) {
            }
            done = 1;   /* CUT: the server dies with replies still owed */
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

static void fake_start(fake *f, int mode, int expect, int answer) {
    memset(f, 0, sizeof(*f));
    f->mode = mode;
    f->expect = expect;
    f->answer = answer;
    snprintf(f->path, sizeof(f->path), "/tmp/mql-pipeline-%d-%d.sock", (int)getpid(), mode);
    f->listen_fd = fake_unix_listen(f->path);
    pthread_create(&f->thread, NULL, fake_main, f);
}

static void fake_stop(fake *f) {
    shutdown(f->listen_fd, SHUT_RDWR);   /* ends accept() */
    pthread_join(f->thread, NULL);
    close(f->listen_fd);
    unlink(f->path);
}

static mql_redis *client_for(const fake *f) {
    mql_redis_config cfg;
    char err[128];
    memset(&cfg, 0, sizeof(cfg));
    cfg.unix_path = f->path;
    cfg.timeout_ms = 2000;
    return mql_redis_new(&cfg, err, sizeof(err));
}

/* Queues n commands in one step: ECHO v<i> (or an eval of "return 1" with v<i>). */
static uint64_t submit(mql_redis *r, int n, int eval) {
    mql_redis_cmd *cmds[64];
    for (int i = 0; i < n; i++) {
        char v[16];
        const char *argv[2] = {"ECHO", v};
        size_t lens[2] = {4, 0};
        snprintf(v, sizeof(v), "v%d", i);
        lens[1] = strlen(v);
        cmds[i] = eval ? mql_redis_cmd_eval(r, "return 1", 0, 1, &argv[1], &lens[1])
                       : mql_redis_cmd_new(2, argv, lens);
    }
    return mql_redis_submit(r, cmds, n);
}

/* Waits for n op events (up to a bound that only keeps a broken build from
 * hanging) and files them by op id - first. */
static int collect(mql_redis *r, uint64_t first, int n, mql_event **by_index) {
    int got = 0;
    for (int spins = 0; got < n && spins < 100; spins++) {
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

static int reply_is(const mql_event *ev, int i) {
    char v[16];
    snprintf(v, sizeof(v), "v%d", i);
    return ev && ev->result.ok && ev->reply && ev->reply->type == MQL_REPLY_STRING &&
           strcmp(ev->reply->str, v) == 0;
}

static void free_events(mql_event **evs, int n) {
    for (int i = 0; i < n; i++) mql_event_free(evs[i]);
}

static void commands_queued_together_cross_in_one_round_trip(void) {
    fake f;
    mql_event *evs[32] = {0};
    uint64_t trips = 0, commands = 0, first;
    mql_redis *r;
    fake_start(&f, ECHO, 0, 0);
    r = client_for(&f);
    first = submit(r, 32, 0);
    CHECK(collect(r, first, 32, evs) == 32);
    for (int i = 0; i < 32; i++) CHECK(reply_is(evs[i], i));   /* its own reply, no shift */
    mql_redis_stats(r, &trips, &commands);
    CHECK(commands == 32);
    CHECK(trips == 1);
    free_events(evs, 32);
    mql_redis_free(r);
    fake_stop(&f);
}

static void a_server_that_dies_mid_reply_fails_the_rest(void) {
    fake f;
    mql_event *evs[8] = {0};
    uint64_t first;
    mql_redis *r;
    fake_start(&f, CUT, 8, 3);
    r = client_for(&f);
    first = submit(r, 8, 0);
    CHECK(collect(r, first, 8, evs) == 8);   /* every command answered, none lost */
    for (int i = 0; i < 3; i++) CHECK(reply_is(evs[i], i));
    for (int i = 3; i < 8; i++) {
        CHECK(evs[i] && !evs[i]->result.ok && !evs[i]->reply);
        CHECK(evs[i] && strcmp(evs[i]->result.code, "UNAVAILABLE") == 0);
    }
    free_events(evs, 8);
    mql_redis_free(r);
    fake_stop(&f);
}

static void more_replies_than_commands_fail_the_whole_batch(void) {
    fake f;
    mql_event *evs[4] = {0};
    uint64_t first;
    mql_redis *r;
    fake_start(&f, EXTRA, 4, 0);
    r = client_for(&f);
    first = submit(r, 4, 0);
    CHECK(collect(r, first, 4, evs) == 4);
    /* which reply is whose cannot be known: none is handed out */
    for (int i = 0; i < 4; i++) CHECK(evs[i] && !evs[i]->result.ok && !evs[i]->reply);
    free_events(evs, 4);
    mql_redis_free(r);
    fake_stop(&f);
}

static void noscript_replies_rerun_as_eval_in_one_more_round_trip(void) {
    fake f;
    mql_event *evs[6] = {0};
    uint64_t trips = 0, commands = 0, first;
    mql_redis *r;
    fake_start(&f, ECHO, 0, 0);
    r = client_for(&f);
    first = submit(r, 6, 1);
    CHECK(collect(r, first, 6, evs) == 6);
    for (int i = 0; i < 6; i++) CHECK(reply_is(evs[i], i));
    mql_redis_stats(r, &trips, &commands);
    CHECK(trips == 2);
    free_events(evs, 6);
    mql_redis_free(r);
    fake_stop(&f);
}

/* Commands of more scripts than the client's cache holds, built before any is
 * submitted: the first scripts are evicted while their commands wait, and
 * each command must still re-run with its own text (freed or shared wrongly,
 * AddressSanitizer or the replies would tell). */
static void scripts_evicted_while_queued_rerun_with_their_own_text(void) {
    enum { N = 10 };
    fake f;
    mql_event *evs[N] = {0};
    mql_redis_cmd *cmds[N];
    char scripts[N][32];
    uint64_t first;
    mql_redis *r;
    fake_start(&f, SCRIPTS, 0, 0);
    r = client_for(&f);
    for (int i = 0; i < N; i++) {
        const char *argv[1] = {"k"};
        size_t lens[1] = {1};
        snprintf(scripts[i], sizeof(scripts[i]), "return 'v%d'", i);
        /* the same script twice in a row: one cached copy serves both */
        cmds[i] = mql_redis_cmd_eval(r, scripts[i / 2 * 2], 1, 1, argv, lens);
    }
    first = mql_redis_submit(r, cmds, N);
    CHECK(collect(r, first, N, evs) == N);
    for (int i = 0; i < N; i++)
        CHECK(evs[i] && evs[i]->reply && strcmp(evs[i]->reply->str, scripts[i / 2 * 2]) == 0);
    free_events(evs, N);
    mql_redis_free(r);
    fake_stop(&f);
}

/* Submits ECHO v<i> alone and waits for its event. */
static mql_event *echo_alone(mql_redis *r, int i) {
    char v[16];
    const char *argv[2] = {"ECHO", v};
    size_t lens[2] = {4, 0};
    mql_event *ev = NULL;
    uint64_t op;
    snprintf(v, sizeof(v), "v%d", i);
    lens[1] = strlen(v);
    op = mql_redis_command(r, 2, argv, lens);
    collect(r, op, 1, &ev);
    return ev;
}

/* A reply that comes twice: the one left over must never be taken for the
 * next command's (hiredis hands a buffered reply out without even sending
 * the command, and every reply after it would be one behind). */
static void a_reply_sent_twice_is_never_taken_for_a_later_command(void) {
    fake f;
    mql_redis *r;
    fake_start(&f, TWICE, 0, 0);
    r = client_for(&f);
    for (int i = 0; i < 4; i++) {
        mql_event *ev = echo_alone(r, i);
        CHECK(ev != NULL);
        /* its own reply, or a failure; never another command's */
        CHECK(ev && (!ev->result.ok || reply_is(ev, i)));
        if (i > 0) CHECK(reply_is(ev, i));   /* a fresh connection serves it */
        mql_event_free(ev);
    }
    mql_redis_free(r);
    fake_stop(&f);
}

/* A server that closed an idle connection (Redis's `timeout`, a proxy): the
 * next command, alone or in a batch, never left, so it must not fail. */
static void a_connection_closed_while_idle_fails_no_command(void) {
    fake f;
    mql_event *evs[3] = {0};
    mql_event *ev;
    uint64_t first;
    mql_redis *r;
    fake_start(&f, IDLE_CLOSE, 0, 0);
    r = client_for(&f);
    ev = echo_alone(r, 0);
    CHECK(reply_is(ev, 0));
    mql_event_free(ev);
    usleep(4 * IDLE_MS * 1000);   /* the fake hangs up */
    ev = echo_alone(r, 1);
    CHECK(reply_is(ev, 1));
    if (ev && !ev->result.ok) fprintf(stderr, "  alone: %s %s\n", ev->result.code, ev->result.msg);
    mql_event_free(ev);
    ev = echo_alone(r, 2);   /* a connection for the batch below, whatever became of v1 */
    CHECK(reply_is(ev, 2));
    mql_event_free(ev);
    usleep(4 * IDLE_MS * 1000);
    first = submit(r, 3, 0);
    CHECK(collect(r, first, 3, evs) == 3);
    for (int i = 0; i < 3; i++) CHECK(reply_is(evs[i], i));
    if (evs[0] && !evs[0]->result.ok) fprintf(stderr, "  batch: %s\n", evs[0]->result.msg);
    free_events(evs, 3);
    mql_redis_free(r);
    fake_stop(&f);
}

int main(void) {
    RUN(commands_queued_together_cross_in_one_round_trip);
    RUN(a_server_that_dies_mid_reply_fails_the_rest);
    RUN(more_replies_than_commands_fail_the_whole_batch);
    RUN(noscript_replies_rerun_as_eval_in_one_more_round_trip);
    RUN(scripts_evicted_while_queued_rerun_with_their_own_text);
    RUN(a_reply_sent_twice_is_never_taken_for_a_later_command);
    RUN(a_connection_closed_while_idle_fails_no_command);
    return TEST_REPORT("redis_pipeline");
}
