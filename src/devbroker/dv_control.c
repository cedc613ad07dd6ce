/* dv_control.c -- the control port on a loopback TCP socket (see dv_control.h).
 *
 * One thread polls the listening socket, a wake-up pipe and up to
 * MAX_CLIENTS connections. Nothing blocks: a silent client cannot hold the
 * others off, and stop() writes to the pipe, so the thread ends at once. */
#include "dv_control.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dv_command.h"
#include "mql.h"

#define MAX_CLIENTS 16
#define LINE_MAX_LEN 1024

typedef struct client {
    int fd;                    /* -1: free slot */
    char buf[LINE_MAX_LEN];
    size_t used;
    int64_t last_ms;           /* monotonic: last byte read */
} client;

struct dv_control {
    dv_server *srv;
    int fd;
    int wake[2];               /* stop() writes here */
    pthread_t thread;
    client clients[MAX_CLIENTS];
};

void dv_control_apply(dv_server *s, const char *line, char *out, size_t outlen) {
    dv_command cmd;
    char err[160];
    pthread_mutex_t *mu = dv_server_lock(s);
    if (dv_command_parse(line, &cmd, err, sizeof(err)) < 0) {
        snprintf(out, outlen, "error %s", err);
        return;
    }
    pthread_mutex_lock(mu);
    switch (cmd.kind) {
    case DV_CMD_TOPIC:
        dv_server_add_topic_locked(s, cmd.name);
        snprintf(out, outlen, "ok topic %s", cmd.name);
        break;
    case DV_CMD_PUBLISH:
        if (dv_server_publish_locked(s, cmd.name, cmd.delay_ms, err, sizeof(err)) == 0)
            snprintf(out, outlen, "ok %s", err);
        else
            snprintf(out, outlen, "error %s", err);
        break;
    case DV_CMD_SET:
        if (dv_faults_set(dv_server_faults(s), cmd.name, cmd.value, err, sizeof(err)) == 0)
            snprintf(out, outlen, "ok %s=%s", cmd.name, cmd.value);
        else
            snprintf(out, outlen, "error %s", err);
        break;
    case DV_CMD_DROP_STREAMS:
        dv_server_faults(s)->drop_streams = 1;
        snprintf(out, outlen, "ok");
        break;
    case DV_CMD_RECONNECT:
        dv_server_faults(s)->reconnect_streams = 1;
        snprintf(out, outlen, "ok");
        break;
    case DV_CMD_STATS: {
        char buf[480];   /* within the 512 of an answer line */
        dv_server_stats(s, buf, sizeof(buf));
        snprintf(out, outlen, "ok %s", buf);
        break;
    }
    }
    pthread_mutex_unlock(mu);
}

static void drop(client *cl) {
    close(cl->fd);
    cl->fd = -1;
    cl->used = 0;
}

/* Answers every complete line; drops the client on EOF, error or a line too long. */
static void serve(dv_control *c, client *cl) {
    char out[512];
    char *nl;
    ssize_t n = read(cl->fd, cl->buf + cl->used, sizeof(cl->buf) - 1 - cl->used);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
        drop(cl);
        return;
    }
    cl->used += (size_t)n;
    cl->buf[cl->used] = '\0';
    cl->last_ms = mql_now_ms();
    while ((nl = memchr(cl->buf, '\n', cl->used))) {
        size_t len;
        *nl = '\0';
        if (nl > cl->buf && nl[-1] == '\r') nl[-1] = '\0';
        dv_control_apply(c->srv, cl->buf, out, sizeof(out) - 1);
        len = strlen(out);
        out[len++] = '\n';
        if (send(cl->fd, out, len, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)len) {
            drop(cl);   /* a client that does not read its answers */
            return;
        }
        cl->used -= (size_t)(nl + 1 - cl->buf);
        memmove(cl->buf, nl + 1, cl->used + 1);
    }
    if (cl->used == sizeof(cl->buf) - 1) drop(cl);
}

static void accept_one(dv_control *c) {
    int fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    size_t i;
    if (fd < 0) return;
    for (i = 0; i < MAX_CLIENTS; i++) {
        if (c->clients[i].fd < 0) {
            c->clients[i].fd = fd;
            c->clients[i].used = 0;
            c->clients[i].last_ms = mql_now_ms();
            return;
        }
    }
    close(fd);   /* full: the client sees EOF */
}

static int64_t timeout_ms(dv_control *c) {
    int64_t t;
    pthread_mutex_lock(dv_server_lock(c->srv));
    t = dv_server_faults(c->srv)->control_timeout_ms;
    pthread_mutex_unlock(dv_server_lock(c->srv));
    return t;
}

static void *control_main(void *arg) {
    dv_control *c = arg;
    for (;;) {
        struct pollfd pf[MAX_CLIENTS + 2];
        client *who[MAX_CLIENTS + 2];
        size_t n = 0, i;
        int64_t now = mql_now_ms(), idle = timeout_ms(c);
        pf[n].fd = c->wake[0];
        pf[n++].events = POLLIN;
        pf[n].fd = c->fd;
        pf[n++].events = POLLIN;
        for (i = 0; i < MAX_CLIENTS; i++) {
            client *cl = &c->clients[i];
            if (cl->fd < 0) continue;
            if (now - cl->last_ms >= idle) {
                drop(cl);
                continue;
            }
            pf[n].fd = cl->fd;
            pf[n].events = POLLIN;
            who[n++] = cl;
        }
        if (poll(pf, n, 100) < 0 && errno != EINTR) break;
        if (pf[0].revents) break;
        if (pf[1].revents & POLLIN) accept_one(c);
        for (i = 2; i < n; i++)
            if (pf[i].revents) serve(c, who[i]);
    }
    return NULL;
}

/* The port answers anyone who connects (no authentication): it binds only a
 * loopback address (127.0.0.0/8) unless the operator asked for more. */
static int listen_on(const char *listen_addr, int any, int *port) {
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    char host[64];
    const char *colon = strrchr(listen_addr, ':');
    int one = 1, fd;
    if (!colon || (size_t)(colon - listen_addr) >= sizeof(host)) return -1;
    memcpy(host, listen_addr, (size_t)(colon - listen_addr));
    host[colon - listen_addr] = '\0';
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return -1;
    if (!any && (ntohl(sa.sin_addr.s_addr) >> 24) != 127) return -2;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
        close(fd);
        return -1;
    }
    getsockname(fd, (struct sockaddr *)&sa, &len);
    *port = ntohs(sa.sin_port);
    return fd;
}

dv_control *dv_control_start(dv_server *s, const char *listen_addr, int any, int *port,
                             int *refused) {
    dv_control *c = mql_xcalloc(1, sizeof(*c));
    size_t i;
    c->srv = s;
    for (i = 0; i < MAX_CLIENTS; i++) c->clients[i].fd = -1;
    c->fd = listen_on(listen_addr, any, port);
    *refused = c->fd == -2;
    if (c->fd < 0) {
        free(c);
        return NULL;
    }
    if (pipe2(c->wake, O_CLOEXEC) < 0) {
        close(c->fd);
        free(c);
        return NULL;
    }
    if (mql_thread_start(&c->thread, control_main, c) < 0) {   /* signals stay with main */
        close(c->fd);
        close(c->wake[0]);
        close(c->wake[1]);
        free(c);
        return NULL;
    }
    return c;
}

void dv_control_stop(dv_control *c) {
    size_t i;
    if (!c) return;
    if (write(c->wake[1], "x", 1) < 0) { /* the pipe cannot be full: one byte, once */ }
    pthread_join(c->thread, NULL);
    for (i = 0; i < MAX_CLIENTS; i++)
        if (c->clients[i].fd >= 0) close(c->clients[i].fd);
    close(c->fd);
    close(c->wake[0]);
    close(c->wake[1]);
    free(c);
}
