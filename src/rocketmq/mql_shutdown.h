/* mql_shutdown.h -- SIGTERM/SIGINT for a worker process, with a deadline that
 * holds even when Lua is stuck.
 *
 * A watcher thread turns the signals into a readable descriptor (so the Lua
 * scheduler starts its graceful drain) and then starts a countdown that must
 * cover the whole drain (grace, the nacks of running handlers, the goodbye to
 * the proxy). If the host has not called mql_shutdown_done() when it runs out
 * (a handler spinning in a busy loop never gives the scheduler a turn), or a
 * second signal arrives meanwhile (the operator wants out now), the watcher
 * nacks every lease the registered clients hold -- so other instances get the
 * messages at once -- and ends the process with _exit(128 + first signal).
 */
#ifndef MQL_SHUTDOWN_H
#define MQL_SHUTDOWN_H

#include <stdint.h>

#include "mql_client.h"

typedef struct mql_shutdown mql_shutdown;

/* Watches the given signals. The watcher holds a reference on each client
 * until mql_shutdown_free, so the host may close them in any order.
 * deadline_ms: how long after the signal the host's drain may take;
 * release_delay_ms: the delay of the nacks the watcher sends itself. */
mql_shutdown *mql_shutdown_new(const int *signals, int nsignals, mql_client **clients,
                               int nclients, int64_t deadline_ms, int64_t release_delay_ms,
                               char *err, size_t errlen);
int mql_shutdown_fd(const mql_shutdown *s);
/* The signal that arrived (0 if none yet); drains the descriptor. A signal
 * the host never read this way is raised again by mql_shutdown_free. */
int mql_shutdown_signal(mql_shutdown *s);
/* The host's drain is alive and needs ms more from now (after a signal). */
void mql_shutdown_extend(mql_shutdown *s, int64_t ms);
/* The host finished its own drain: the watcher will not intervene. */
void mql_shutdown_done(mql_shutdown *s);
/* Restores the signal dispositions, stops the watcher and frees it; then
 * raises, under those dispositions, a signal that reached nobody: the first
 * one if the host never read it, or one that came after mql_shutdown_done. */
void mql_shutdown_free(mql_shutdown *s);

#endif /* MQL_SHUTDOWN_H */
