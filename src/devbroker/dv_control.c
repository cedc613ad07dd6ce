/* dv_control.c -- a line protocol on a loopback TCP port (see dv_control.h).
 * One thread accepts and serves one connection at a time: tests send a few
 * commands, nothing here needs to be fast. */
#include "dv_control.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mql.h"

struct dv_control {
    dv_server *srv;
    int fd;
    pthread_t thread;
    volatile int stop;
};

void dv_control_apply(dv_server *s, const char *line, char *out, size_t outlen) {
    char cmd[32] = "", key[64] = "", val[256] = "";
    dv_faults *f = dv_server_faults(s);
    int n = sscanf(line, "%31s %63s %255s", cmd, key, val);
    pthread_mutex_t *mu = dv_server_lock(s);
    if (n >= 2 && strcmp(cmd, "topic") == 0) {
        dv_server_add_topic(s, key);
        snprintf(out, outlen, "ok topic %s", key);
        return;
    }
    pthread_mutex_lock(mu);
    if (n == 3 && strcmp(cmd, "set") == 0) {
        double v = atof(val);
        if (strcmp(key, "fail_change") == 0) f->fail_change = v;
        else if (strcmp(key, "fail_ack") == 0) f->fail_ack = v;
        else if (strcmp(key, "delay_change_ms") == 0) f->delay_change_ms = (int64_t)v;
        else if (strcmp(key, "max_renewals") == 0) f->max_renewals = (int)v;
        else if (strcmp(key, "paused") == 0) f->paused = (int)v;
        else if (strcmp(key, "min_invisible_ms") == 0) f->min_invisible_ms = (int64_t)v;
        else if (strcmp(key, "time_scale") == 0 && v > 0) f->time_scale = v;
        else {
            snprintf(out, outlen, "error unknown setting '%s'", key);
            pthread_mutex_unlock(mu);
            return;
        }
        snprintf(out, outlen, "ok %s=%s", key, val);
    } else if (n >= 1 && strcmp(cmd, "drop_streams") == 0) {
        f->drop_streams = 1;
        snprintf(out, outlen, "ok");
    } else if (n >= 1 && strcmp(cmd, "stats") == 0) {
        char buf[256];
        dv_server_stats(s, buf, sizeof(buf));
        snprintf(out, outlen, "ok %s", buf);
    } else {
        snprintf(out, outlen, "error unknown command (topic, set, drop_streams, stats)");
    }
    pthread_mutex_unlock(mu);
}

static void serve(dv_control *c, int conn) {
    char buf[1024], out[512];
    size_t used = 0;
    for (;;) {
        ssize_t n = read(conn, buf + used, sizeof(buf) - 1 - used);
        char *nl;
        if (n <= 0) return;
        used += (size_t)n;
        buf[used] = '\0';
        while ((nl = strchr(buf, '\n'))) {
            *nl = '\0';
            if (nl > buf && nl[-1] == '\r') nl[-1] = '\0';
            dv_control_apply(c->srv, buf, out, sizeof(out) - 1);
            strcat(out, "\n");
            if (write(conn, out, strlen(out)) < 0) return;
            used -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, used + 1);
        }
        if (used == sizeof(buf) - 1) return;   /* a line too long: drop the client */
    }
}

static void *control_main(void *arg) {
    dv_control *c = arg;
    while (!c->stop) {
        int conn = accept(c->fd, NULL, NULL);
        if (conn < 0) {
            if (errno == EINTR) continue;
            break;
        }
        serve(c, conn);
        close(conn);
    }
    return NULL;
}

dv_control *dv_control_start(dv_server *s, const char *listen_addr, int *port) {
    dv_control *c = mql_xcalloc(1, sizeof(*c));
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    char host[64];
    const char *colon = strrchr(listen_addr, ':');
    int one = 1;
    sigset_t all, old;
    if (!colon || (size_t)(colon - listen_addr) >= sizeof(host)) goto fail;
    memcpy(host, listen_addr, (size_t)(colon - listen_addr));
    host[colon - listen_addr] = '\0';
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) goto fail;
    c->srv = s;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) goto fail;
    setsockopt(c->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(c->fd, 8) < 0) {
        close(c->fd);
        goto fail;
    }
    getsockname(c->fd, (struct sockaddr *)&sa, &len);
    *port = ntohs(sa.sin_port);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    if (pthread_create(&c->thread, NULL, control_main, c) != 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        close(c->fd);
        goto fail;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return c;
fail:
    free(c);
    return NULL;
}

void dv_control_stop(dv_control *c) {
    if (!c) return;
    c->stop = 1;
    shutdown(c->fd, SHUT_RDWR);   /* wakes accept() */
    pthread_join(c->thread, NULL);
    close(c->fd);
    free(c);
}
