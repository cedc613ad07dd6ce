/* cluster_fake.h -- the fake Redis Cluster of the C tests: CLUSTER SLOTS
 * replies written as RESP text, and fake nodes on socketpairs that a
 * mql_cluster reaches through fake_connect. A node answers CLUSTER SLOTS with
 * the fake's current topology, anything else with what its test's answer
 * hook says (+OK when there is none); a dead one refuses connections. Every
 * connect is logged, and every command with the node it went to. */
#ifndef CLUSTER_FAKE_H
#define CLUSTER_FAKE_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mql_redis_cluster.h"

static inline redisReply *parse_resp(const char *text) {
    redisReader *reader = redisReaderCreate();
    void *reply = NULL;
    redisReaderFeed(reader, text, strlen(text));
    if (redisReaderGetReply(reader, &reply) != REDIS_OK) reply = NULL;
    redisReaderFree(reader);
    return reply;
}

/* Appends printf output to a growing RESP text. */
typedef struct text {
    char *buf;
    size_t len, cap;
} text;

static void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void text_add(text *t, const char *fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->len + (size_t)n + 1 > t->cap) {
        t->cap = (t->len + (size_t)n + 1) * 2;
        t->buf = realloc(t->buf, t->cap);
    }
    va_start(ap, fmt);
    vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

static inline void text_node(text *t, const char *host) {
    text_add(t, "*3\r\n$%zu\r\n%s\r\n:7000\r\n$2\r\nid\r\n", strlen(host), host);
}

/* A CLUSTER SLOTS reply: the slots split evenly over n masters named
 * master[i] (port 7000), each with one replica named replica[i] if given. */
static inline char *slots_text(int n, char (*master)[32], char (*replica)[32]) {
    text t = {NULL, 0, 0};
    text_add(&t, "*%d\r\n", n);
    for (int i = 0; i < n; i++) {
        int lo = MQL_CLUSTER_SLOTS * i / n, hi = MQL_CLUSTER_SLOTS * (i + 1) / n - 1;
        text_add(&t, "*%d\r\n:%d\r\n:%d\r\n", replica ? 4 : 3, lo, hi);
        text_node(&t, master[i]);
        if (replica) text_node(&t, replica[i]);
    }
    return t.buf;
}
/* ------------------------------------------------------------ fake nodes */

#define FAKE_CONNS 32

/* What a node answers to cmd (not CLUSTER SLOTS): RESP text written to out,
 * or NULL for +OK. */
typedef const char *(*fake_answer_fn)(const char *host, const redisReply *cmd, char *out,
                                      size_t outlen);

typedef struct fake {
    const char *dead[8];     /* hosts that refuse connections */
    int ndead;
    char *slots;             /* the CLUSTER SLOTS answer */
    fake_answer_fn answer;   /* NULL: +OK */
    char log[512];           /* "host host ..." in connect order */
    char cmds[1024];         /* "host:COMMAND host:COMMAND ..." in the order served */
    int fds[FAKE_CONNS];     /* the served ends */
    char hosts[FAKE_CONNS][32];
    pthread_t threads[FAKE_CONNS];
    int nconns;
    pthread_mutex_t mu;
} fake;

typedef struct served {
    fake *f;
    int fd;
    int twice;   /* a node named "twice-...": answers its first command twice */
    char host[32];
} served;

/* The answer to one command (mutex held). */
static const char *fake_reply(served *sv, const redisReply *c, char *out, size_t outlen) {
    fake *f = sv->f;
    const char *answer;
    snprintf(f->cmds + strlen(f->cmds), sizeof(f->cmds) - strlen(f->cmds), "%s:%s ", sv->host,
             c->element[0]->str);
    if (strcasecmp(c->element[0]->str, "CLUSTER") == 0) return f->slots;
    if (sv->twice) {   /* its last argument, the first time twice */
        const redisReply *last = c->element[c->elements - 1];
        snprintf(out, outlen, "$%zu\r\n%s\r\n", last->len, last->str);
        if (sv->twice++ == 1)
            snprintf(out + strlen(out), outlen - strlen(out), "$%zu\r\n%s\r\n", last->len, last->str);
        return out;
    }
    answer = f->answer ? f->answer(sv->host, c, out, outlen) : NULL;
    return answer ? answer : "+OK\r\n";
}

static void *serve(void *arg) {
    served *sv = arg;
    redisReader *reader = redisReaderCreate();
    char buf[4096];
    ssize_t n;
    while ((n = read(sv->fd, buf, sizeof(buf))) > 0) {
        void *cmd = NULL;
        redisReaderFeed(reader, buf, (size_t)n);
        while (redisReaderGetReply(reader, &cmd) == REDIS_OK && cmd) {
            char out[256];
            const char *reply;
            pthread_mutex_lock(&sv->f->mu);
            reply = fake_reply(sv, cmd, out, sizeof(out));
            if (write(sv->fd, reply, strlen(reply)) < 0) n = 0;
            pthread_mutex_unlock(&sv->f->mu);
            freeReplyObject(cmd);
            cmd = NULL;
        }
    }
    redisReaderFree(reader);
    free(sv);
    return NULL;
}

static inline int fake_dead(const fake *f, const char *host) {
    for (int i = 0; i < f->ndead; i++)
        if (strcmp(f->dead[i], host) == 0) return 1;
    return 0;
}

static inline redisContext *fake_connect(void *arg, const char *host, int port, mql_result *res) {
    fake *f = arg;
    int sv[2];
    served *s;
    redisContext *ctx;
    struct timeval tv = {1, 0};
    (void)port;
    snprintf(f->log + strlen(f->log), sizeof(f->log) - strlen(f->log), "%s ", host);
    if (fake_dead(f, host) || f->nconns == FAKE_CONNS || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
        mql_result_fail(res, "UNAVAILABLE", "fake: %s refuses", host);
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    s->f = f;
    s->fd = sv[1];
    s->twice = strncmp(host, "twice-", 6) == 0;
    snprintf(s->host, sizeof(s->host), "%s", host);
    f->fds[f->nconns] = sv[1];
    snprintf(f->hosts[f->nconns], sizeof(f->hosts[0]), "%s", host);
    pthread_create(&f->threads[f->nconns++], NULL, serve, s);
    ctx = redisConnectFd(sv[0]);
    redisSetTimeout(ctx, tv);
    return ctx;
}

/* host dies: its connections break, new ones are refused */
static inline void fake_kill(fake *f, const char *host) {
    f->dead[f->ndead++] = host;
    for (int i = 0; i < f->nconns; i++)
        if (strcmp(f->hosts[i], host) == 0) shutdown(f->fds[i], SHUT_RDWR);
}

static inline void fake_set_slots(fake *f, char *slots) {
    pthread_mutex_lock(&f->mu);
    free(f->slots);
    f->slots = slots;
    pthread_mutex_unlock(&f->mu);
}

static inline void fake_init(fake *f) {
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
}

/* After mql_cluster_close, which closed the near ends: the threads end. */
static inline void fake_end(fake *f) {
    for (int i = 0; i < f->nconns; i++) {
        pthread_join(f->threads[i], NULL);
        close(f->fds[i]);
    }
    free(f->slots);
    pthread_mutex_destroy(&f->mu);
}

static inline redisReply *run_set(mql_cluster *cl, fake *f, const char *key, mql_result *res) {
    const char *argv[3] = {"SET", key, "v"};
    size_t lens[3] = {3, strlen(key), 1};
    f->log[0] = '\0';
    f->cmds[0] = '\0';
    return mql_cluster_run(cl, fake_connect, f, 3, argv, lens, 1, res);
}

#endif /* CLUSTER_FAKE_H */
