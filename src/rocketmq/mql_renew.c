/* mql_renew.c -- where a lease lives: its timers, its budget, its renewals.
 *
 * Each lease in the table has one timer in the heap: its next renewal, the
 * check that its deadline has passed, or (a release held while the session
 * reconnects, mql_release.c) the latest moment its release may go out. A
 * renewal is ChangeInvisibleDuration with the newest receipt handle; only a
 * successful reply replaces the handle, with one that names the same message
 * (the proxy would still accept the old one, but an ack with it does nothing and a
 * change arms a second deadline). Failures retry with backoff while the
 * deadline allows; a rejected handle ends the lease at once (no retry storm).
 * The budget (max_renewals, max_lease) ends renewing with one decision:
 * let it expire, or nack it (the budget's own nack lives here: no host op
 * waits for it, and if it fails the lease renews on).
 *
 * Pacing (mql_pace.h): each lease renews at its own phase of the period, so
 * the renewals of many leases come evenly, and at most pace.max_inflight renewals
 * are out at once. A due renewal beyond that cap stays at the top of the
 * heap, and the timers behind it wait for the next reply (which comes within
 * the request timeout): leases renew in timer order, and a renewal's latency
 * is the broker's, not our queue's.
 *
 * Renew stands on release, never the other way round. A lease's timer is
 * what decides, over its life, that it must leave: its deadline passed (the
 * releases waiting for it fail, it ends LOST), its budget is spent (nack), a
 * renewal's reply came (the releases deferred behind it go out). So this file
 * calls down into mql_release.c (mql_release_end, mql_release_fail_lease,
 * mql_release_run_lease), and a release needs nothing of renewing: while a
 * lease renews it waits on the lease's state, not on a call here. What both
 * send, ChangeInvisibleDuration, is below both (mql_change.c). Kept as two
 * files, not merged: the life of a message should show in `ls` (enter, live,
 * leave), and the two share only that request and the lease's fields.
 *
 * While the session moves to another proxy, a due renewal is held as a
 * release is (mql_release.c says why: until that proxy has our settings,
 * 5.2.0 fails a ChangeInvisibleDuration with INTERNAL_SERVER_ERROR, and the
 * proxy we left is dead): its timer moves to the latest moment that still
 * leaves a request timeout and what a call on a new channel needs before the
 * deadline, and mql_renew_resume brings it forward once the settings are
 * back. A renewal that cannot wait goes out at once, as before.
 *
 * Every function here runs with c->mu held unless it says otherwise.
 */
#include "mql_renew.h"
#include "mql_change.h"
#include "mql_release.h"

#include <stdlib.h>
#include <string.h>

#define RENEW_BACKOFF_MIN_MS 200
#define RENEW_BACKOFF_MAX_MS 5000
#define RENEW_BLOCKED_WAKE_MS 20   /* at the in-flight cap: look again this soon at the latest */

static void on_renew_done(mql_client *c, mql_call *call);
static void on_budget_nack_done(mql_client *c, mql_call *call);

static const mql_call_ops renew_ops = {.on_done = on_renew_done};
static const mql_call_ops budget_nack_ops = {.on_done = on_budget_nack_done};

int64_t mql_renew_next_at(mql_client *c, const mql_lease *l) {
    return mql_pace_first_at(&c->consumer.pace, l->acquired_ms, l->deadline_ms, l->id);
}

static void renew_start(mql_client *c, mql_lease *l, int64_t now);
static int renew_held(mql_client *c, mql_lease *l, int64_t now);

static int budget_spent(const mql_client *c, const mql_lease *l, int64_t now) {
    const mql_consumer_part *cs = &c->consumer;
    if (cs->max_renewals >= 0 && l->renewals >= cs->max_renewals) return 1;
    if (cs->max_lease_ms > 0 && now + cs->invisible_ms - l->acquired_ms > cs->max_lease_ms) return 1;
    return 0;
}

/* The lease's due timer would start a renewal (and so needs a free slot). */
static int wants_renewal(const mql_client *c, const mql_lease *l, int64_t now) {
    return now < l->deadline_ms && l->state == MQL_LEASE_HELD &&
           l->pending == MQL_PENDING_NONE && c->consumer.renew && !budget_spent(c, l, now);
}

/* The budget's own nack (on_budget = "nack"): no host op waits for it, so the
 * call's op names the lease. -1 if it did not start. */
static int budget_nack(mql_client *c, mql_lease *l) {
    return mql_change_start(c, l, c->consumer.release_delay_ms, &budget_nack_ops, l->id,
                            NULL);
}

/* After the budget's own nack failed: the lease renews on if it may (with
 * on_budget = "nack" it is EXPIRING, so it waits for its deadline). A release
 * the host asked for that fails is let expire instead (mql_release.c). */
static void budget_nack_failed(mql_client *c, mql_lease *l) {
    mql_consumer_part *cs = &c->consumer;
    int64_t now = mql_now_ms();
    l->pending = MQL_PENDING_NONE;
    if (l->state == MQL_LEASE_EXPIRING || !cs->renew) mql_lease_arm(&cs->leases, l, l->deadline_ms);
    else mql_lease_arm(&cs->leases, l, now);
}

/* Counted as any nack (nacks_total, errors{op="nack"}). A nack with no reply
 * is a ChangeInvisibleDuration that may have been applied, as a renewal with
 * none may: the broker then hands the message on after release_delay, under
 * a handle we never saw, while this lease waits for its deadline. */
static void on_budget_nack_done(mql_client *c, mql_call *call) {
    mql_result r;
    void *resp = mql_call_reply(
        call, &apache__rocketmq__v2__change_invisible_duration_response__descriptor, &r);
    mql_lease *l = mql_lease_find(&c->consumer.leases, call->op);
    if (r.ok) {
        c->metrics.nacks_ok++;
    } else {
        c->metrics.nacks_fail++;
        mql_metrics_error(&c->metrics, "nack", r.code);
    }
    if (l && r.ok) {
        mql_release_end(c, l, MQL_LEASE_NACKED);
    } else if (l) {
        if (mql_change_unanswered(r.code)) l->uncertain = 1;
        budget_nack_failed(c, l);
    }
    mql_call_reply_free(resp);
}

/* One timer of one lease is due: the deadline passed, or it is time to renew. */
static void lease_timer(mql_client *c, mql_lease *l, int64_t now) {
    mql_consumer_part *cs = &c->consumer;
    mql_lease_disarm(&cs->leases, l);
    if (now >= l->deadline_ms && l->pending != MQL_PENDING_NONE &&
        now < l->deadline_ms + 2 * c->request_timeout_ms) {
        /* An ack or nack is on the wire: its reply decides the lease's one
         * outcome (the broker may well have taken it in time). The call ends
         * within its own deadline; this is only the safety net. */
        mql_lease_arm(&cs->leases, l, now + c->request_timeout_ms);
        return;
    }
    if (now >= l->deadline_ms) {
        /* The broker has given the message to someone else by now. */
        if (l->state != MQL_LEASE_EXPIRING || !l->let_go) c->metrics.expire_while_alive++;
        c->metrics.lost_expired++;
        mql_release_fail_lease(c, l->id, "LEASE_LOST", "the lease expired before the release");
        mql_release_end(c, l, MQL_LEASE_LOST);
        return;
    }
    if (l->pending != MQL_PENDING_NONE) {
        /* Its release is on the wire (the deadline check stays armed), or
         * held while the session reconnects, whose timer this is: the lease
         * can wait no longer, and the release goes out now (mql_release.c). */
        mql_lease_arm(&cs->leases, l, l->deadline_ms);
        if (c->reconnecting) mql_release_run_lease(c, l->id);
        return;
    }
    if (l->state != MQL_LEASE_HELD || !cs->renew) {
        mql_lease_arm(&cs->leases, l, l->deadline_ms);
        return;
    }
    if (budget_spent(c, l, now)) {
        l->state = MQL_LEASE_EXPIRING;
        mql_base_post_lease(c, l, MQL_LEASE_EXPIRING);
        if (cs->on_budget == MQL_BUDGET_NACK) {
            c->metrics.budget_nack++;
            l->pending = MQL_PENDING_NACK;
            if (budget_nack(c, l) == 0) return;
            l->pending = MQL_PENDING_NONE;
        } else {
            c->metrics.budget_expire++;
        }
        mql_lease_arm(&cs->leases, l, l->deadline_ms);
        return;
    }
    if (renew_held(c, l, now)) return;
    renew_start(c, l, now);
}

/* Whether l's due renewal waits for the session's reconnect; if so its timer
 * is armed at the latest moment it may go out, and the lease noted for
 * mql_renew_resume. */
static int renew_held(mql_client *c, mql_lease *l, int64_t now) {
    mql_consumer_part *cs = &c->consumer;
    int64_t send_by;
    if (!c->reconnecting || c->stopping) return 0;
    send_by = l->deadline_ms - mql_change_new_channel_needs_ms(c) - c->request_timeout_ms;
    /* mql_renew_timers takes a renewal up to the slack early: a timer armed
     * within it would be taken again by the same pass, for ever */
    if (send_by <= now + mql_pace_slack_ms(&cs->pace)) return 0;
    if (cs->nrenew_held == cs->renew_held_cap) {
        uint64_t *grown;
        cs->renew_held_cap = cs->renew_held_cap ? 2 * cs->renew_held_cap : 16;
        grown = mql_xmalloc(cs->renew_held_cap * sizeof(*grown));
        if (cs->nrenew_held) memcpy(grown, cs->renew_held, cs->nrenew_held * sizeof(*grown));
        free(cs->renew_held);
        cs->renew_held = grown;
    }
    cs->renew_held[cs->nrenew_held++] = l->id;
    mql_lease_arm(&cs->leases, l, send_by);
    return 1;
}

void mql_renew_resume(mql_client *c) {
    mql_consumer_part *cs = &c->consumer;
    int64_t now = mql_now_ms();
    size_t i;
    for (i = 0; i < cs->nrenew_held; i++) {
        mql_lease *l = mql_lease_find(&cs->leases, cs->renew_held[i]);
        if (l && l->state == MQL_LEASE_HELD && l->pending == MQL_PENDING_NONE && l->timer_ms > now)
            mql_lease_arm(&cs->leases, l, now);
    }
    cs->nrenew_held = 0;
}

static void renew_start(mql_client *c, mql_lease *l, int64_t now) {
    mql_consumer_part *cs = &c->consumer;
    mql_lease_set_renew_sent(l, now);
    l->window_ms = (uint32_t)cs->invisible_ms;
    /* one sent early (within the pace's slack) was not late */
    mql_hist_observe(&c->metrics.renew_lateness,
                     now > l->timer_ms ? (double)(now - l->timer_ms) / 1000.0 : 0.0);
    /* a renewal names its lease by the call's op */
    if (mql_change_start(c, l, l->window_ms, &renew_ops, l->id, NULL) < 0) {
        mql_lease_arm(&cs->leases, l, now + RENEW_BACKOFF_MIN_MS);
        return;
    }
    l->state = MQL_LEASE_RENEWING;
    cs->renew_inflight++;
    /* no timer while renewing: the reply (or the call's own deadline) re-arms it */
}

static int64_t retry_needs_ms(const mql_client *c, const char *code) {
    if (strcmp(code, "UNAVAILABLE") == 0) return mql_change_new_channel_needs_ms(c);
    return c->request_timeout_ms;
}

/* Whether a failed renewal's time says how long renewals take: a timeout is
 * slowness too, and so is a broker's error. UNAVAILABLE did not reach one
 * (grpc fails a call at once while the channel is down) and CANCELLED was
 * our own: fed as latencies of ~0 ms, a proxy outage pulled the p99 down, and
 * with it the margin and what a retry on the new proxy must have left. */
static int says_latency(const char *code) {
    return strcmp(code, "UNAVAILABLE") != 0 && strcmp(code, "CANCELLED") != 0;
}

/* An OK says the change was made, so the broker minted a handle for this
 * message. One that did not come back, or that names another message (or
 * none we can read, where ours had the proxy's layout), is a broken reply,
 * and uncertain as a lost one: taken, it would have been the handle the
 * next renewal and the ack send, so the ack would settle another message's
 * checkpoint, or none, and ours revive. r becomes a PROTOCOL error; 1 if so. */
static int reply_without_handle(mql_result *r,
                                const Apache__Rocketmq__V2__ChangeInvisibleDurationResponse *resp,
                                const mql_lease *l) {
    if (!r->ok) return 0;
    if (!(resp->receipt_handle && *resp->receipt_handle))
        mql_result_fail(r, "PROTOCOL", "ChangeInvisibleDuration: OK without a receipt handle");
    else if (!mql_handle_names_message(resp->receipt_handle, l->handle))
        mql_result_fail(r, "PROTOCOL",
                        "ChangeInvisibleDuration: OK with a receipt handle of another message");
    return !r->ok;
}

static void on_renew_done(mql_client *c, mql_call *call) {
    mql_consumer_part *cs = &c->consumer;
    mql_result r;
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse *resp = mql_call_reply(
        call, &apache__rocketmq__v2__change_invisible_duration_response__descriptor, &r);
    mql_lease *l = mql_lease_find(&cs->leases, call->op);
    int64_t now = mql_now_ms();
    int no_handle;
    cs->renew_inflight--;
    if (!l || l->state != MQL_LEASE_RENEWING) goto out;   /* gone meanwhile */
    l->state = MQL_LEASE_HELD;
    no_handle = reply_without_handle(&r, resp, l);
    if (r.ok) {
        /* The old handle is dead to us from this instant: the proxy would still
         * accept it, but an ack with it does nothing and a change arms a
         * second deadline. */
        mql_lease_take_handle(l, mql_handle_after_change(resp->receipt_handle));
        l->deadline_ms = mql_lease_renew_sent_ms(l) + l->window_ms;
        l->renewals++;
        l->attempts = 0;
        c->metrics.renew_success++;
        mql_hist_observe(&c->metrics.renew_latency, (double)(now - mql_lease_renew_sent_ms(l)) / 1000.0);
        mql_pace_observe(&cs->pace, now - mql_lease_renew_sent_ms(l));
        mql_lease_arm(&cs->leases, l, mql_pace_next_at(&cs->pace, mql_lease_renew_sent_ms(l),
                                                      l->deadline_ms, l->id));
    } else if (strcmp(r.code, "INVALID_RECEIPT_HANDLE") == 0) {
        /* final: the broker no longer knows this delivery; no retry storm */
        c->metrics.renew_fail++;
        c->metrics.lost_rejected++;
        if (l->pending == MQL_PENDING_NONE) c->metrics.expire_while_alive++;
        mql_release_fail_lease(c, l->id, "LEASE_LOST", "the broker rejected the receipt handle");
        mql_release_end(c, l, MQL_LEASE_LOST);
        l = NULL;
    } else {
        /* A reply that never came may still have minted a handle we never saw;
         * the message may come back once more. Count it apart. */
        int uncertain = no_handle || mql_change_unanswered(r.code);
        int64_t backoff = RENEW_BACKOFF_MIN_MS << (l->attempts < 5 ? l->attempts : 5);
        if (says_latency(r.code)) mql_pace_observe(&cs->pace, now - mql_lease_renew_sent_ms(l));
        /* The change may have been applied: then the broker minted a handle we
         * never saw, and armed a deadline that our handle cannot cancel. No
         * handle we hold can undo that, so we keep renewing with the one we
         * have (the message stays hidden through it) and say so: the message
         * may come back once more, which the exactly-once policy's done
         * marker turns into a plain ack. */
        if (uncertain) {
            c->metrics.renew_uncertain++;
            l->uncertain = 1;
        } else {
            c->metrics.renew_fail++;
        }
        mql_metrics_error(&c->metrics, "renew", r.code);
        if (backoff > RENEW_BACKOFF_MAX_MS) backoff = RENEW_BACKOFF_MAX_MS;
        if (l->attempts < UINT16_MAX) l->attempts++;
        if (now + backoff + retry_needs_ms(c, r.code) < l->deadline_ms)
            mql_lease_arm(&cs->leases, l, now + backoff);
        else
            mql_lease_arm(&cs->leases, l, l->deadline_ms);
    }
    if (l && l->let_go) {
        /* the host let it expire while this renewal was out: that stands */
        l->state = MQL_LEASE_EXPIRING;
        mql_lease_arm(&cs->leases, l, l->deadline_ms);
    }
out:
    mql_call_reply_free(resp);
    /* the release that waited for this reply, if any (a renewal names its lease by op) */
    mql_release_run_lease(c, call->op);
}

/* How late a due renewal is at now (0: not a renewal, or not due). */
static int64_t due_age(const mql_client *c, const mql_lease *l, int64_t now) {
    return l && l->timer_ms < now && wants_renewal(c, l, now) ? now - l->timer_ms : 0;
}

/* The pass's verdict on the due queue (mql_pace.h, "behind"): its age, the
 * later of the oldest renewal at the pass's start and the oldest still
 * waiting at its end; behind when the one still waiting is past the
 * threshold, or when the pass itself sent a backlog that late. One renewal
 * sent late alone (the thread woke late) holds no receive. */
static void note_queue(mql_client *c, int64_t start_age, int64_t end_age, int late_sent) {
    mql_consumer_part *cs = &c->consumer;
    int64_t limit = mql_pace_behind_ms(&cs->pace);
    cs->renew_queue_age_ms = start_age > end_age ? start_age : end_age;
    cs->renew_behind = end_age > limit || late_sent >= MQL_PACE_BEHIND_BACKLOG;
    c->metrics.renew_queue_age_ms = cs->renew_queue_age_ms;
    if (cs->renew_queue_age_ms > c->metrics.renew_queue_age_max_ms)
        c->metrics.renew_queue_age_max_ms = cs->renew_queue_age_ms;
}

int mql_renew_behind(const mql_client *c) {
    return c->consumer.renew_behind;
}

int64_t mql_renew_timers(mql_client *c, int64_t now, int64_t wake) {
    mql_consumer_part *cs = &c->consumer;
    int64_t early = now + mql_pace_slack_ms(&cs->pace), limit = mql_pace_behind_ms(&cs->pace);
    int64_t start_age = due_age(c, mql_lease_next(&cs->leases), now);
    int late_sent = 0;
    mql_lease *l;
    while ((l = mql_lease_next(&cs->leases))) {
        int renewal = wants_renewal(c, l, now);
        /* due timers, and renewals due within the slack (only those: a
         * deadline check must not come early) */
        if (l->timer_ms > (renewal ? early : now)) break;
        if (renewal && mql_pace_may_start(&cs->pace, cs->renew_inflight, cs->renew_behind) == 0) {
            note_queue(c, start_age, due_age(c, l, now), late_sent);
            return now + RENEW_BLOCKED_WAKE_MS < wake ? now + RENEW_BLOCKED_WAKE_MS : wake;
        }
        if (renewal && now - l->timer_ms > limit) late_sent++;
        lease_timer(c, l, now);
    }
    note_queue(c, start_age, 0, late_sent);
    if ((l = mql_lease_next(&cs->leases)) && l->timer_ms < wake) wake = l->timer_ms;
    return wake;
}
