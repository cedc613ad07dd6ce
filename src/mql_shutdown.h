/* mql_shutdown.h -- SIGTERM/SIGINT for a worker process, with a deadline that
 * holds even when Lua is stuck.
 *
 * A watcher thread turns the signals into a readable descriptor (so the Lua
 * scheduler starts its graceful drain) and then starts a countdown. If the
 * host has not called mql_shutdown_done() when it runs out (a handler spinning
 * in a busy loop never gives the scheduler a turn), the watcher releases every
 * lease the registered clients hold -- so other instances get the messages at
 * once -- and ends the process with _exit(128 + signal).
 */
#ifndef MQL_SHUTDOWN_H
#define MQL_SHUTDOWN_H

#include <stdint.h>

#include "mql_client.h"

typedef struct mql_shutdown mql_shutdown;

/* Watches the given signals. clients must stay alive until mql_shutdown_free.
 * grace_ms: how long after the signal the host may take; release_ms: the
 * nack delay used when the watcher has to release leases itself. */
mql_shutdown *mql_shutdown_new(const int *signals, int nsignals, mql_client **clients,
                               int nclients, int64_t grace_ms, int64_t release_delay_ms,
                               char *err, size_t errlen);
int mql_shutdown_fd(const mql_shutdown *s);
/* The signal that arrived (0 if none yet); drains the descriptor. */
int mql_shutdown_signal(mql_shutdown *s);
/* The host finished its own drain: the watcher will not intervene. */
void mql_shutdown_done(mql_shutdown *s);
/* Restores the signal dispositions, stops the watcher and frees it. */
void mql_shutdown_free(mql_shutdown *s);

#endif /* MQL_SHUTDOWN_H */
