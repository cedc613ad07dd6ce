/* shutdown_test.c -- the signal watcher (mql_shutdown.c) without clients and
 * without a server: what becomes of a signal when the host is done.
 *
 * A watcher takes the first signal from the process and hands it to the host
 * (its descriptor turns readable; mql_shutdown_signal reads it). A host whose
 * own drain was already under way may finish and free the watcher without
 * ever reading it -- mqlease.run closing its consumer after a `stop` or
 * `run_for`, when the SIGTERM comes meanwhile. Such a signal reached nobody:
 * it must go back to the process under the disposition it had before the
 * watcher, as one that came after the host was done does, and not vanish. */
#include <poll.h>
#include <signal.h>
#include <string.h>

#include "mql_shutdown.h"
#include "mql_test.h"

static volatile sig_atomic_t got;

static void on_usr1(int signo) {
    (void)signo;
    got++;
}

/* A watcher of SIGUSR1 over the process's own handler (on_usr1), which it
 * restores when freed; the first signal has reached it when this returns. */
static mql_shutdown *watch_and_signal(struct sigaction *old) {
    struct sigaction sa;
    struct pollfd p;
    int sigs[1] = {SIGUSR1};
    char err[128];
    mql_shutdown *s;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, old);
    got = 0;
    s = mql_shutdown_new(sigs, 1, NULL, 0, 600000, 0, err, sizeof(err));
    if (!s) return NULL;
    raise(SIGUSR1);
    p.fd = mql_shutdown_fd(s);
    p.events = POLLIN;
    while (poll(&p, 1, -1) < 0) {
    }
    return s;
}

static void a_signal_the_host_never_read_goes_back_to_the_process(void) {
    struct sigaction old;
    mql_shutdown *s = watch_and_signal(&old);
    CHECK(s != NULL);
    if (!s) return;
    CHECK(got == 0);   /* the watcher took it */
    mql_shutdown_done(s);
    mql_shutdown_free(s);
    CHECK(got == 1);   /* before: 0, the signal was lost */
    sigaction(SIGUSR1, &old, NULL);
}

static void a_signal_the_host_read_is_not_raised_again(void) {
    struct sigaction old;
    mql_shutdown *s = watch_and_signal(&old);
    CHECK(s != NULL);
    if (!s) return;
    CHECK(mql_shutdown_signal(s) == SIGUSR1);
    mql_shutdown_done(s);
    mql_shutdown_free(s);
    CHECK(got == 0);   /* the host drained for it: it is handled */
    sigaction(SIGUSR1, &old, NULL);
}

int main(void) {
    RUN(a_signal_the_host_never_read_goes_back_to_the_process);
    RUN(a_signal_the_host_read_is_not_raised_again);
    return TEST_REPORT("shutdown_test");
}
