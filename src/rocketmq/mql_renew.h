/* mql_renew.h -- where a lease lives (see mql_renew.c): its timers, its
 * budget, its renewals. Runs with c->mu held.
 */
#ifndef MQL_RENEW_H
#define MQL_RENEW_H

#include "mql_base.h"

/* When a lease just received renews first: paced, so leases received
 * together do not renew together (see mql_pace.h). */
int64_t mql_renew_next_at(mql_client *c, const mql_lease *l);
/* The session's new proxy has our settings: the renewals held for the
 * reconnect (mql_renew.c) are due now. */
void mql_renew_resume(mql_client *c);
/* Runs every due lease timer; returns the earlier of wake and the next one.
 * Each pass judges the due queue: its age (metrics) and whether the renewals
 * are behind (mql_pace.h), which mql_renew_behind answers until the next. */
int64_t mql_renew_timers(mql_client *c, int64_t now, int64_t wake);
/* The last pass found the renewals behind: receives wait (mql_receive.c). */
int mql_renew_behind(const mql_client *c);

#endif /* MQL_RENEW_H */
