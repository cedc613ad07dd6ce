/* tcp_node_fake.h -- fake Redis Cluster nodes on loopback TCP for the C tests
 * of a whole client (mql_redis), which connects by host and port: each node
 * answers CLUSTER SLOTS with the test's map, an EVALSHA 1 (a renewal kept) and
 * anything else +OK, or, silent, reads every command and answers none (a
 * frozen process, a blackholed route). Every node writes what it is sent, and
 * when a silent node's connection is closed, into one shared log, in the order
 * it happens: a test tells from that order what waited for what, without
 * asserting wall time. */
#ifndef TCP_NODE_FAKE_H
#define TCP_NODE_FAKE_H

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mql_redis_cluster.h"
#include "mql_test.h"

#define NODE_CONNS 16

typedef struct shared_log {
    pthread_mutex_t mu;
    char text[4096];   /* "a:CLUSTER a:EVALSHA b:EVALSHA b:closed ..." */
    const char *slots; /* the CLUSTER SLOTS answer */
} shared_log;

typedef struct node {
    char name;         /* 'a' or 'b' */
    int silent;        /* 1: reads, never writes */
    int listen_fd, port;
    shared_log *log;
    pthread_t acceptor;
    pthread_t conns[NODE_CONNS];
    int fds[NODE_CONNS];
    int nconns;        /* touched only by the acceptor until it is joined */
} node;

typedef struct conn {
    node *n;
    int fd;
} conn;

static inline void log_add(shared_log *log, char name, const char *what) {
    pthread_mutex_lock(&log->mu);
    snprintf(log->text + strlen(log->text), sizeof(log->text) - strlen(log->text), "%c:%s ", name,
             what);
    pthread_mutex_unlock(&log->mu);
}

/* What a node that answers says to cmd. */
static inline const char *answer(const node *n, const redisReply *cmd) {
    if (strcasecmp(cmd->element[0]->str, "CLUSTER") == 0) return n->log->slots;
    if (strcasecmp(cmd->element[0]->str, "EVALSHA") == 0) return ":1\r\n";
    return "+OK\r\n";
}

static inline void *serve(void *arg) {
    conn *c = arg;
    redisReader *reader = redisReaderCreate();
    char buf[4096];
    ssize_t got;
    while ((got = read(c->fd, buf, sizeof(buf))) > 0) {
        void *cmd = NULL;
        redisReaderFeed(reader, buf, (size_t)got);
        while (redisReaderGetReply(reader, &cmd) == REDIS_OK && cmd) {
            const redisReply *r = cmd;
            const char *reply = answer(c->n, r);
            log_add(c->n->log, c->n->name, r->element[0]->str);
            if (!c->n->silent && write(c->fd, reply, strlen(reply)) < 0) got = 0;
            freeReplyObject(cmd);
            cmd = NULL;
        }
    }
    if (c->n->silent) log_add(c->n->log, c->n->name, "closed");
    redisReaderFree(reader);
    free(c);
    return NULL;
}

static inline void *accept_conns(void *arg) {
    node *n = arg;
    int fd;
    while ((fd = accept(n->listen_fd, NULL, NULL)) >= 0) {
        conn *c = malloc(sizeof(*c));
        if (n->nconns == NODE_CONNS) {
            free(c);
            close(fd);
            continue;
        }
        c->n = n;
        c->fd = fd;
        n->fds[n->nconns] = fd;
        pthread_create(&n->conns[n->nconns++], NULL, serve, c);
    }
    return NULL;
}

static inline void node_start(node *n, char name, int silent, shared_log *log) {
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    memset(n, 0, sizeof(*n));
    n->name = name;
    n->silent = silent;
    n->log = log;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    n->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(bind(n->listen_fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(n->listen_fd, 16) == 0);
    CHECK(getsockname(n->listen_fd, (struct sockaddr *)&a, &len) == 0);
    n->port = ntohs(a.sin_port);
    pthread_create(&n->acceptor, NULL, accept_conns, n);
}

/* After the client is freed, which closed its ends: every thread ends. */
static inline void node_stop(node *n) {
    shutdown(n->listen_fd, SHUT_RDWR);
    pthread_join(n->acceptor, NULL);
    close(n->listen_fd);
    for (int i = 0; i < n->nconns; i++) {
        pthread_join(n->conns[i], NULL);
        close(n->fds[i]);
    }
}

/* A key whose hash tag falls in [lo, hi]. */
static inline void key_in(char *key, size_t len, int lo, int hi) {
    for (int i = 0;; i++) {
        snprintf(key, len, "lock:{t%d}", i);
        int slot = mql_cluster_slot(key, strlen(key));
        if (slot >= lo && slot <= hi) return;
    }
}

/* Where the nth (from 1) `what` is in text, or strlen(text) (after all) when
 * there are fewer. */
static inline size_t nth_at(const char *text, const char *what, int nth) {
    const char *p = text;
    while ((p = strstr(p, what)) != NULL)
        if (--nth == 0) return (size_t)(p - text);
        else p += strlen(what);
    return strlen(text);
}

static inline int count_of(shared_log *log, const char *what) {
    int n = 0;
    pthread_mutex_lock(&log->mu);
    for (const char *p = log->text; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
    pthread_mutex_unlock(&log->mu);
    return n;
}

#endif /* TCP_NODE_FAKE_H */
