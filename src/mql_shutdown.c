/* mql_shutdown.c -- signals to a descriptor, and the deadline behind them
 * (see mql_shutdown.h).
 *
 * The one piece of process-wide state in the core lives here: a signal handler
 * cannot be given a context, so the self-pipe it writes to is a static. Only
 * one watcher may exist at a time, which mql_shutdown_new enforces.
 */
#include "mql_shutdown.h"

#include "mql.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIGNALS 8

static int signal_pipe_w = -1;   /* written by the handler; see the file comment */

static void on_signal(int signo) {
    unsigned char b = (unsigned char)signo;
    int saved = errno;
    if (signal_pipe_w >= 0 && write(signal_pipe_w, &b, 1) < 0) {
        /* pipe full: a signal is already pending, nothing is lost */
    }
    errno = saved;
}

struct mql_shutdown {
    int host_pipe[2];            /* readable for the host once a signal came */
    int watch_pipe[2];           /* the handler's pipe, read by the watcher */
    int signals[MAX_SIGNALS];
    struct sigaction old[MAX_SIGNALS];
    int nsignals;
    mql_client **clients;
    int nclients;
    int64_t grace_ms, release_delay_ms;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int done;                    /* the host finished (or is freeing us) */
    int signo;                   /* first signal seen */
};

static void wait_for_done(mql_shutdown *s, int64_t ms) {
    struct timespec ts;
    mql_abstime_after(&ts, ms);
    pthread_mutex_lock(&s->mu);
    while (!s->done) {
        if (pthread_cond_timedwait(&s->cond, &s->mu, &ts) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&s->mu);
}

static void *watch_main(void *arg) {
    mql_shutdown *s = arg;
    unsigned char b;
    int i, done;
    for (;;) {
        ssize_t n = read(s->watch_pipe[0], &b, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 || b == 0) return NULL;   /* 0: mql_shutdown_free wakes us to leave */
        pthread_mutex_lock(&s->mu);
        if (!s->signo) s->signo = b;
        done = s->done;
        pthread_mutex_unlock(&s->mu);
        if (done) return NULL;
        if (write(s->host_pipe[1], &b, 1) < 0) {
            /* the host's pipe is full: it has been told already */
        }
        break;
    }
    wait_for_done(s, s->grace_ms);
    pthread_mutex_lock(&s->mu);
    done = s->done;
    pthread_mutex_unlock(&s->mu);
    if (done) return NULL;
    /* The host did not finish in time: give every held message back now, so
     * it is not stuck for a whole invisible duration, and leave. */
    fprintf(stderr, "mqlease: shutdown grace of %lld ms ran out; releasing leases and exiting\n",
            (long long)s->grace_ms);
    for (i = 0; i < s->nclients; i++) mql_client_nack_all(s->clients[i], s->release_delay_ms);
    for (i = 0; i < s->nclients; i++) mql_client_wait_released(s->clients[i], 1000);
    _exit(128 + s->signo);
    return NULL;
}

static int make_pipe(int p[2]) {
    if (pipe2(p, O_CLOEXEC) < 0) return -1;
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    return 0;
}

mql_shutdown *mql_shutdown_new(const int *signals, int nsignals, mql_client **clients,
                               int nclients, int64_t grace_ms, int64_t release_delay_ms,
                               char *err, size_t errlen) {
    mql_shutdown *s;
    sigset_t all, old;
    struct sigaction sa;
    int i;
    if (signal_pipe_w >= 0) {
        snprintf(err, errlen, "signals are already watched (one watcher per process)");
        return NULL;
    }
    if (nsignals > MAX_SIGNALS) nsignals = MAX_SIGNALS;
    s = mql_xcalloc(1, sizeof(*s));
    if (make_pipe(s->host_pipe) < 0 || make_pipe(s->watch_pipe) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        free(s);
        return NULL;
    }
    fcntl(s->host_pipe[0], F_SETFL, O_NONBLOCK);
    s->clients = mql_xcalloc((size_t)nclients, sizeof(*s->clients));
    memcpy(s->clients, clients, (size_t)nclients * sizeof(*clients));
    s->nclients = nclients;
    s->grace_ms = grace_ms;
    s->release_delay_ms = release_delay_ms;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    signal_pipe_w = s->watch_pipe[1];

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    s->thread_started = pthread_create(&s->thread, NULL, watch_main, s) == 0;
    if (!s->thread_started) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        signal_pipe_w = -1;
        snprintf(err, errlen, "cannot start the signal watcher");
        mql_shutdown_free(s);
        return NULL;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (i = 0; i < nsignals; i++) {
        s->signals[i] = signals[i];
        sigaction(signals[i], &sa, &s->old[i]);
    }
    s->nsignals = nsignals;
    return s;
}

int mql_shutdown_fd(const mql_shutdown *s) {
    return s->host_pipe[0];
}

int mql_shutdown_signal(mql_shutdown *s) {
    unsigned char b;
    int signo;
    while (read(s->host_pipe[0], &b, 1) > 0) {
    }
    pthread_mutex_lock(&s->mu);
    signo = s->signo;
    pthread_mutex_unlock(&s->mu);
    return signo;
}

void mql_shutdown_done(mql_shutdown *s) {
    pthread_mutex_lock(&s->mu);
    s->done = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

void mql_shutdown_free(mql_shutdown *s) {
    unsigned char zero = 0;
    int i;
    if (!s) return;
    for (i = 0; i < s->nsignals; i++) sigaction(s->signals[i], &s->old[i], NULL);
    mql_shutdown_done(s);
    if (signal_pipe_w == s->watch_pipe[1]) signal_pipe_w = -1;
    if (s->thread_started) {
        if (write(s->watch_pipe[1], &zero, 1) < 0) {
            /* full pipe: the watcher is awake already */
        }
        pthread_join(s->thread, NULL);
    }
    close(s->host_pipe[0]);
    close(s->host_pipe[1]);
    close(s->watch_pipe[0]);
    close(s->watch_pipe[1]);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s->clients);
    free(s);
}
