/* mql_shutdown.c -- signals to a descriptor, and the deadline behind them
 * (see mql_shutdown.h).
 *
 * The one piece of process-wide state in the core lives here: a signal handler
 * cannot be given a context, so the self-pipe it writes to is a static. It is
 * made once and never closed, so a handler running on another thread while a
 * watcher goes away can never write into a closed (or reused) descriptor.
 * Only one watcher may exist at a time, which mql_shutdown_new enforces.
 *
 * The watcher holds a reference on each client (mql_client_ref): the host may
 * close a client while the watcher still runs, and the watcher's emergency
 * nack then meets a closed client that answers CLOSED, never freed memory.
 */
#include "mql_shutdown.h"

#include "mql.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SIGNALS 8

static int signal_pipe[2] = {-1, -1};   /* see the file comment */
static int watcher_exists;                /* guarded by the host: one watcher at a time */

static void on_signal(int signo) {
    unsigned char b = (unsigned char)signo;
    int saved = errno;
    if (write(signal_pipe[1], &b, 1) < 0) {
        /* pipe full: a signal is already pending, nothing is lost */
    }
    errno = saved;
}

struct mql_shutdown {
    int host_pipe[2];            /* readable for the host once a signal came */
    int quit_pipe[2];            /* wakes the watcher: the host is done, or frees it */
    int signals[MAX_SIGNALS];
    struct sigaction old[MAX_SIGNALS];
    int nsignals;
    mql_client **clients;        /* each referenced until mql_shutdown_free */
    int nclients;
    int64_t deadline_ms, release_delay_ms;
    int64_t deadline_at;         /* monotonic; 0 until the first signal */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    int done;                    /* the host finished (or is freeing us) */
    int signo;                   /* first signal seen */
    int taken;                   /* the host read it (mql_shutdown_signal) */
};

static int is_done(mql_shutdown *s) {
    int done;
    pthread_mutex_lock(&s->mu);
    done = s->done;
    pthread_mutex_unlock(&s->mu);
    return done;
}

static void drain_pipe(int fd) {
    unsigned char b[64];
    while (read(fd, b, sizeof(b)) > 0) {
    }
}

/* Waits for a signal until deadline (monotonic ms, < 0: forever); returns the
 * signal, 0 if the host woke us (done or free), -1 at the deadline. */
static int next_signal(mql_shutdown *s, int64_t deadline) {
    struct pollfd fds[2];
    unsigned char b;
    for (;;) {
        int64_t left = deadline < 0 ? -1 : deadline - mql_now_ms();
        if (deadline >= 0 && left <= 0) return -1;
        fds[0].fd = signal_pipe[0];
        fds[0].events = POLLIN;
        fds[1].fd = s->quit_pipe[0];
        fds[1].events = POLLIN;
        if (poll(fds, 2, left > 0x7fffffff ? 0x7fffffff : (int)left) < 0) {
            if (errno == EINTR) continue;
            return 0;
        }
        if (fds[1].revents) {
            drain_pipe(s->quit_pipe[0]);
            return 0;
        }
        if (fds[0].revents && read(signal_pipe[0], &b, 1) == 1 && b) return b;
    }
}

/* The host did not finish in time (or was told twice): give every held
 * message back now, so none is stuck for a whole invisible duration, and
 * leave. The nacks get the time their calls may take, deferred ones included. */
static void emergency_exit(mql_shutdown *s, const char *why) {
    int i;
    fprintf(stderr, "mqlease: %s; nacking held leases and exiting\n", why);
    for (i = 0; i < s->nclients; i++) mql_client_nack_all(s->clients[i], s->release_delay_ms);
    for (i = 0; i < s->nclients; i++)
        mql_client_wait_released(s->clients[i],
                                 2 * mql_client_request_timeout_ms(s->clients[i]) + 1000);
    _exit(128 + s->signo);
}

static int64_t deadline_at(mql_shutdown *s) {
    int64_t at;
    pthread_mutex_lock(&s->mu);
    at = s->deadline_at;
    pthread_mutex_unlock(&s->mu);
    return at;
}

static void *watch_main(void *arg) {
    mql_shutdown *s = arg;
    int sig;
    do {
        sig = next_signal(s, -1);
        if (is_done(s)) return NULL;
    } while (sig <= 0);
    pthread_mutex_lock(&s->mu);
    s->signo = sig;
    s->deadline_at = mql_now_ms() + s->deadline_ms;   /* deadline_ms may have been extended */
    pthread_mutex_unlock(&s->mu);
    if (write(s->host_pipe[1], "s", 1) < 0) {
        /* the host's pipe is full: it has been told already */
    }
    /* The drain runs; the host may push the deadline while it is alive. */
    for (;;) {
        int64_t at = deadline_at(s);
        sig = next_signal(s, at);
        if (is_done(s)) return NULL;
        if (sig > 0) emergency_exit(s, "a second signal arrived during the drain");
        if (sig < 0 && deadline_at(s) <= mql_now_ms())
            emergency_exit(s, "the drain ran past its deadline");
    }
}

static int make_pipe(int p[2]) {
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) return -1;
    return 0;
}

mql_shutdown *mql_shutdown_new(const int *signals, int nsignals, mql_client **clients,
                               int nclients, int64_t deadline_ms, int64_t release_delay_ms,
                               char *err, size_t errlen) {
    mql_shutdown *s;
    struct sigaction sa;
    int i;
    if (watcher_exists) {
        snprintf(err, errlen, "signals are already watched (one watcher per process)");
        return NULL;
    }
    if (signal_pipe[0] < 0 && make_pipe(signal_pipe) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return NULL;
    }
    drain_pipe(signal_pipe[0]);   /* a signal of an earlier watcher is not ours */
    if (nsignals > MAX_SIGNALS) nsignals = MAX_SIGNALS;
    s = mql_xcalloc(1, sizeof(*s));
    s->host_pipe[0] = s->host_pipe[1] = s->quit_pipe[0] = s->quit_pipe[1] = -1;
    if (make_pipe(s->host_pipe) < 0 || make_pipe(s->quit_pipe) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        for (i = 0; i < 2; i++) {
            if (s->host_pipe[i] >= 0) close(s->host_pipe[i]);
            if (s->quit_pipe[i] >= 0) close(s->quit_pipe[i]);
        }
        free(s);
        return NULL;
    }
    s->clients = mql_xcalloc((size_t)nclients, sizeof(*s->clients));
    for (i = 0; i < nclients; i++) {
        mql_client_ref(clients[i]);
        s->clients[i] = clients[i];
    }
    s->nclients = nclients;
    s->deadline_ms = deadline_ms;
    s->release_delay_ms = release_delay_ms;
    pthread_mutex_init(&s->mu, NULL);
    watcher_exists = 1;

    s->thread_started = mql_thread_start(&s->thread, watch_main, s) == 0;
    if (!s->thread_started) {
        snprintf(err, errlen, "cannot start the signal watcher");
        mql_shutdown_free(s);
        return NULL;
    }
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
    int signo;
    drain_pipe(s->host_pipe[0]);
    pthread_mutex_lock(&s->mu);
    signo = s->signo;
    if (signo) s->taken = 1;
    pthread_mutex_unlock(&s->mu);
    return signo;
}

void mql_shutdown_extend(mql_shutdown *s, int64_t ms) {
    pthread_mutex_lock(&s->mu);
    if (s->deadline_at) s->deadline_at = mql_now_ms() + ms;
    else if (ms > s->deadline_ms) s->deadline_ms = ms;   /* a drain begun before any signal */
    pthread_mutex_unlock(&s->mu);
    if (write(s->quit_pipe[1], "e", 1) < 0) {
        /* full pipe: the watcher is awake already */
    }
}

void mql_shutdown_done(mql_shutdown *s) {
    pthread_mutex_lock(&s->mu);
    s->done = 1;
    pthread_mutex_unlock(&s->mu);
    if (write(s->quit_pipe[1], "q", 1) < 0) {
        /* full pipe: the watcher is awake already */
    }
}

void mql_shutdown_free(mql_shutdown *s) {
    unsigned char late = 0;
    int i;
    if (!s) return;
    for (i = 0; i < s->nsignals; i++) sigaction(s->signals[i], &s->old[i], NULL);
    mql_shutdown_done(s);
    if (s->thread_started) pthread_join(s->thread, NULL);
    /* A signal that reached nobody goes back to the process, now under the
     * dispositions it had before us: one that came after the host was done,
     * or the first one, which the watcher took but the host never read (its
     * own drain, begun by a stop or a deadline, was ending when it came). */
    if (read(signal_pipe[0], &late, 1) != 1) late = 0;
    if (s->signo && !s->taken) late = (unsigned char)s->signo;   /* the thread is joined */
    if (late) raise(late);
    for (i = 0; i < s->nclients; i++) mql_client_unref(s->clients[i]);
    close(s->host_pipe[0]);
    close(s->host_pipe[1]);
    close(s->quit_pipe[0]);
    close(s->quit_pipe[1]);
    pthread_mutex_destroy(&s->mu);
    free(s->clients);
    free(s);
    watcher_exists = 0;
}
