/* redis_keepalive_cluster_test.c -- the lock keepalive under Redis Cluster
 * when one node goes silent: it takes connections and reads commands but
 * never answers (a frozen process, a blackholed route), so each command to it
 * ends only at the client's timeout. The locks on the other nodes must still
 * be renewed meanwhile: if their renewals waited behind the silent node's
 * timeouts, one node's failure would let every lock lapse.
 *
 * Two fake nodes on loopback TCP (the keepalive link connects by host and
 * port): "a" answers CLUSTER SLOTS and every renewal 1 (kept), "b" answers
 * nothing. Each node writes what it is sent, and when a connection to it is
 * closed, into one shared log in the order it happens. No wall time is
 * asserted: the client closes a connection to "b" only when its wait for a
 * reply ends, so a renewal logged by "a" before that close was sent while
 * "b" was still being waited for. */
#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mql.h"
#include "mql_redis.h"
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

static void log_add(shared_log *log, char name, const char *what) {
    pthread_mutex_lock(&log->mu);
    snprintf(log->text + strlen(log->text), sizeof(log->text) - strlen(log->text), "%c:%s ", name,
             what);
    pthread_mutex_unlock(&log->mu);
}

/* What a node that answers says to cmd. */
static const char *answer(const node *n, const redisReply *cmd) {
    if (strcasecmp(cmd->element[0]->str, "CLUSTER") == 0) return n->log->slots;
    if (strcasecmp(cmd->element[0]->str, "EVALSHA") == 0) return ":1\r\n";
    return "+OK\r\n";
}

static void *serve(void *arg) {
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

static void *accept_conns(void *arg) {
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

static void node_start(node *n, char name, int silent, shared_log *log) {
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
static void node_stop(node *n) {
    shutdown(n->listen_fd, SHUT_RDWR);
    pthread_join(n->acceptor, NULL);
    close(n->listen_fd);
    for (int i = 0; i < n->nconns; i++) {
        pthread_join(n->conns[i], NULL);
        close(n->fds[i]);
    }
}

/* A key whose hash tag falls in [lo, hi]. */
static void key_in(char *key, size_t len, int lo, int hi) {
    for (int i = 0;; i++) {
        snprintf(key, len, "lock:{t%d}", i);
        int slot = mql_cluster_slot(key, strlen(key));
        if (slot >= lo && slot <= hi) return;
    }
}

/* Where the nth (from 1) `what` is in text, or strlen(text) (after all) when
 * there are fewer. */
static size_t nth_at(const char *text, const char *what, int nth) {
    const char *p = text;
    while ((p = strstr(p, what)) != NULL)
        if (--nth == 0) return (size_t)(p - text);
        else p += strlen(what);
    return strlen(text);
}

static int count_of(shared_log *log, const char *what) {
    int n = 0;
    pthread_mutex_lock(&log->mu);
    for (const char *p = log->text; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
    pthread_mutex_unlock(&log->mu);
    return n;
}

/* Node b serves slots 0-8191 and is listed first, a serves the rest and is
 * the seed. A lock on each, b's first in the due order (registered first,
 * due at the same moment): renewed one node after the other, a's renewal
 * would wait for b's timeout. After that timeout the map is read again
 * (a connection broke): from a, which answers, not from b first. */
static void a_silent_node_delays_no_renewal_on_another(void) {
    shared_log log;
    node a, b;
    char slots[256], seed[32], key_a[32], key_b[32], err[128];
    const char *seeds[1] = {seed};
    mql_redis_config cfg;
    mql_redis *r;
    uint64_t id_a, id_b;
    int64_t since;
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
    cfg.timeout_ms = 2000;   /* b's wait: long beside a loopback round trip */
    r = mql_redis_new(&cfg, err, sizeof(err));
    CHECK(r != NULL);
    if (!r) return;
    /* a TTL of a minute: no lock can be lost here, only renewed late */
    since = mql_now_ms();
    id_b = mql_redis_keepalive(r, key_b, strlen(key_b), "me", 2, 60000, 300, 0, since);
    id_a = mql_redis_keepalive(r, key_a, strlen(key_a), "me", 2, 60000, 300, 0, since);
    /* two renewals on a (or b's connections closed twice, if a's wait behind b) */
    for (int spins = 0; spins < 200; spins++) {
        if (count_of(&log, "a:EVALSHA") >= 2 || count_of(&log, "b:closed") >= 2) break;
        usleep(50 * 1000);
    }
    pthread_mutex_lock(&log.mu);
    /* the first renewal on a went out while b's first renewal waited */
    CHECK(nth_at(log.text, "b:EVALSHA", 1) < strlen(log.text));
    CHECK(nth_at(log.text, "a:EVALSHA", 1) < nth_at(log.text, "b:closed", 1));
    /* and after b's timeout, a's next one did not wait for b a second time */
    CHECK(nth_at(log.text, "a:EVALSHA", 2) < nth_at(log.text, "b:closed", 2));
    if (mql_test_failed_checks != failed_before) fprintf(stderr, "  log: %s\n", log.text);
    pthread_mutex_unlock(&log.mu);
    CHECK(mql_redis_keepalive_lost(r, id_a) == 0);
    mql_redis_keepalive_stop(r, id_a);
    mql_redis_keepalive_stop(r, id_b);
    mql_redis_free(r);
    node_stop(&a);
    node_stop(&b);
    pthread_mutex_destroy(&log.mu);
}

int main(void) {
    RUN(a_silent_node_delays_no_renewal_on_another);
    return TEST_REPORT("redis_keepalive_cluster");
}
