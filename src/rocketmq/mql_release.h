/* mql_release.h -- where a message leaves (see mql_release.c): the host's
 * ack, nack, dead letter, let expire and nack-all, the core's own silent
 * nacks, the releases deferred behind renewals or held for a reconnect, and
 * how any lease leaves the table. Runs with c->mu held.
 */
#ifndef MQL_RELEASE_H
#define MQL_RELEASE_H

#include "mql_base.h"

/* A release the host asked for (an ack of one or more leases, or a nack of
 * one): the leases and the op to answer, with one result per lease. */
struct mql_release {
    uint64_t op;
    int is_ack;
    int dead_letter;            /* ForwardMessageToDeadLetterQueue instead of a nack */
    int silent;                 /* started by the core itself: no host op waits for it */
    char reason[32];            /* dead letter: counted under this word */
    int64_t delay_ms;           /* nack */
    uint64_t *ids;
    size_t n;
    mql_result *entries;        /* one result per lease, filled as they settle */
    int *settled;
    int held;                   /* waited for the session's reconnect (counted once) */
    int64_t held_at;            /* since when (it waits one request timeout at most) */
    int no_hold;                /* never waits for a reconnect (nack_all: close, the watcher) */
    mql_deferred_link link;     /* on c->consumer.deferred while a renewal is in flight
                                   or it is held */
};

/* The release whose link this is. */
#define MQL_RELEASE_OF(l) ((mql_release *)(void *)((char *)(l) - offsetof(mql_release, link)))

/* The host's releases (mql_client_ack, _nack, _dead_letter): the op of the
 * event that answers for every lease. A dead letter is forwarded to the
 * group's DLQ and counted under reason. A lease listed twice in one ack gets
 * BUSY for its later entry (its earlier entry's release is under way), so
 * the Lua consumer (consumer:ack) passes each lease once. */
uint64_t mql_release_ack(mql_client *c, const uint64_t *lease_ids, size_t n);
uint64_t mql_release_nack(mql_client *c, uint64_t lease_id, int64_t delay_ms);
uint64_t mql_release_dead_letter(mql_client *c, uint64_t lease_id, const char *reason);
/* Stops renewing the lease (mql_client_let_expire); 0 if there is no such
 * lease or it is already being released. */
int mql_release_let_expire(mql_client *c, uint64_t lease_id);
/* Gives back every lease not already being released (mql_client_nack_all). */
uint64_t mql_release_nack_all(mql_client *c, int64_t delay_ms);
/* The host could not take ev (mql_client_event_dropped): counted, and the
 * leases of its messages nacked after corrupt_delay. */
void mql_release_undelivered(mql_client *c, const mql_event *ev);
/* A lease the host never sees (a corrupted message): dead-letter or nack it
 * from the core; if that fails it is left to expire, never renewed. */
void mql_release_unseen(mql_client *c, mql_lease *l, int dead_letter, int64_t delay_ms,
                        const char *reason);

/* The lease leaves the table in its final state; the host is told. */
void mql_release_end(mql_client *c, mql_lease *l, mql_lease_state final);
/* A lease that ended on its own fails every deferred release that waits for it. */
void mql_release_fail_lease(mql_client *c, uint64_t lease_id, const char *code,
                            const char *msg);
/* Sends the deferred releases whose renewals have come back and, once the
 * session has our settings again, those held for its reconnect (or any whose
 * lease can wait no longer); fails held ones CLOSED once stopping. Looks at
 * every one: for what concerns them all (the settings back, the close). */
void mql_release_run_deferred(mql_client *c);
/* The same for the one deferred release that waits for lease_id, if any: what
 * the lease's timer or its renewal's reply may have let go, looked up by the
 * lease (or all of them, once the need of a new channel has grown past what
 * a held one's timer was armed with). */
void mql_release_run_lease(mql_client *c, uint64_t lease_id);
/* Frees the deferred list unsent: for the client's last moment, after the
 * thread is gone (client_stop). */
void mql_release_drop_deferred(mql_client *c);

#endif /* MQL_RELEASE_H */
