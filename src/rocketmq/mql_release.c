/* mql_release.c -- where a message leaves: ack, nack, let expire.
 *
 * A release is an ack (of one or more leases, in one AckMessage), a nack (a
 * ChangeInvisibleDuration to the delay the host asked for) or a dead letter
 * (ForwardMessageToDeadLetterQueue: the proxy writes the message to
 * %DLQ%<group> and acks it). A release the core starts on its own, for a
 * corrupted message the host never saw, is "silent": no op waits for it. It
 * always uses the lease's newest receipt handle, so it never races a renewal:
 * while any of its leases is being renewed, the release waits on the
 * consumer's deferred list and goes out when the renewal's reply has come
 * back. While the session moves to another proxy, a release is held on the
 * same list until that proxy has our settings (release_held says why). From
 * the moment the host asks, nothing renews the lease: the release
 * decides its fate, and a release that fails leaves it to expire at its
 * deadline (release_settle_lease says why). A lease that ends on its own
 * meanwhile (lost, expired) fails the releases that wait for it.
 *
 * Here too is how any lease leaves the table (mql_release_end): released,
 * lost or given back by the budget. This file calls nothing of renewing:
 * mql_renew.c stands on it (its timers fail the releases of a lost lease and
 * run the deferred ones after a renewal's reply), and a nack's request is
 * mql_change.c's, which a renewal sends too.
 *
 * Every function here runs with c->mu held unless it says otherwise.
 */
#include "mql_release.h"
#include "mql_ack.h"
#include "mql_change.h"
#include "mql_deferred.h"
#include "mql_lite.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_ack_done(mql_client *c, mql_call *call);
static void on_nack_done(mql_client *c, mql_call *call);
static void on_dead_letter_done(mql_client *c, mql_call *call);

static const mql_call_ops ack_ops = {.on_done = on_ack_done};
static const mql_call_ops nack_ops = {.on_done = on_nack_done};
static const mql_call_ops dead_letter_ops = {.on_done = on_dead_letter_done};

static void release_free(mql_release *rel) {
    free(rel->ids);
    free(rel->entries);
    free(rel->settled);
    free(rel);
}

static int release_done(const mql_release *rel) {
    size_t i;
    for (i = 0; i < rel->n; i++)
        if (!rel->settled[i]) return 0;
    return 1;
}

static void release_post(mql_client *c, mql_release *rel) {
    mql_event *ev;
    size_t i;
    if (rel->silent) return;
    ev = mql_event_new(MQL_EV_OP, rel->op);
    for (i = 0; i < rel->n; i++) {
        if (!rel->entries[i].ok) {
            ev->result = rel->entries[i];
            break;
        }
    }
    ev->entries = rel->entries;
    ev->nentries = rel->n;
    rel->entries = NULL;
    mql_events_push(&c->events, ev);
}

static void settle(mql_client *c, mql_release *rel, size_t i, const mql_result *r) {
    if (rel->settled[i]) return;
    rel->settled[i] = 1;
    rel->entries[i] = *r;
    if (rel->dead_letter) {
        if (r->ok) mql_metrics_reason(&c->metrics.dead_lettered, rel->reason);
        else c->metrics.dead_letter_fail++;
    } else if (rel->is_ack) {
        if (r->ok) c->metrics.acks_ok++;
        else c->metrics.acks_fail++;
    } else {
        if (r->ok) c->metrics.nacks_ok++;
        else c->metrics.nacks_fail++;
    }
    if (!r->ok)
        mql_metrics_error(&c->metrics, rel->dead_letter ? "dead_letter" : rel->is_ack ? "ack" : "nack",
                          r->code);
}

static void release_leave(mql_client *c, mql_release *rel) {
    mql_deferred_remove(&c->consumer.deferred, &rel->link, rel->ids, rel->n);
}

/* Only the release of the lease can wait for it: a lease has one under way. */
void mql_release_fail_lease(mql_client *c, uint64_t lease_id, const char *code,
                            const char *msg) {
    mql_deferred_link *link = mql_deferred_find(&c->consumer.deferred, lease_id);
    mql_release *rel;
    mql_result r;
    size_t i;
    if (!link) return;
    rel = MQL_RELEASE_OF(link);
    c->consumer.deferred_looked_at++;
    mql_result_fail(&r, code, "%s", msg);
    for (i = 0; i < rel->n; i++)
        if (rel->ids[i] == lease_id) settle(c, rel, i, &r);
    if (release_done(rel)) {
        release_leave(c, rel);
        release_post(c, rel);
        release_free(rel);
    }
}

void mql_release_end(mql_client *c, mql_lease *l, mql_lease_state final) {
    mql_base_post_lease(c, l, final);
    mql_lease_remove(&c->consumer.leases, l);
}

/* A lease was held held_ms (receive to ack or nack): with invisible = "auto"
 * it moves the invisible duration of later receives and renewals. */
static void observe_held(mql_client *c, int64_t held_ms) {
    mql_consumer_part *cs = &c->consumer;
    if (!cs->invisible_auto || !mql_auto_observe(&cs->auto_, held_ms)) return;
    /* Leases already out keep their deadlines and timers (each renewal says
     * what it asked for); the pace's period and margin follow the new value. */
    cs->invisible_ms = cs->auto_.value_ms;
    if (!cs->renew_every_fixed) cs->renew_every_ms = cs->invisible_ms / 3;
    cs->pace.invisible_ms = cs->invisible_ms;
    cs->pace.every_ms = cs->renew_every_ms;
}

static void release_settle_lease(mql_client *c, mql_release *rel, size_t i, mql_lease *l,
                                 const mql_result *r) {
    settle(c, rel, i, r);
    if (!l) return;
    if (r->ok) {
        if (!rel->silent) {
            int64_t held = mql_now_ms() - l->acquired_ms;
            mql_hist_observe(&c->metrics.handler, (double)held / 1000.0);
            observe_held(c, held);
        }
        mql_release_end(c, l, rel->is_ack || rel->dead_letter ? MQL_LEASE_ACKED : MQL_LEASE_NACKED);
    } else if (strcmp(r->code, "INVALID_RECEIPT_HANDLE") == 0) {
        c->metrics.lost_rejected++;
        mql_release_end(c, l, MQL_LEASE_LOST);
    } else {
        /* The release failed (the core makes its call once; a timeout may even have been
         * applied: a nack's, a change, marks the lease uncertain as a renewal's does). The
         * lease is not renewed again: the host got `nil, err, code` and has moved on
         * (mqlease.run settles the message whatever the outcome), so renewing would hide the
         * message until max_lease, an hour by default. It comes back at the deadline it
         * already has instead: a nack's "give it back" a little later, a dead letter's message
         * for another delivery (the broker's own retry count still ends it in the DLQ), an
         * ack's at-least-once run again (the ack may have reached the broker; the exactly-once
         * policy's done marker then turns it into a plain ack). Until the deadline the host
         * may still try the release again. A release the core started itself (silent) ends the
         * same way. Counted by settle(): acks, nacks or dead_letter_fail, and errors{op,code}. */
        l->uncertain |= !rel->is_ack && !rel->dead_letter && mql_change_unanswered(r->code);
        l->pending = MQL_PENDING_NONE;
        l->let_go = 1;
        l->state = MQL_LEASE_EXPIRING;
        mql_lease_arm(&c->consumer.leases, l, l->deadline_ms);
    }
}

static void ack_send(mql_client *c, mql_release *rel) {
    mql_consumer_part *cs = &c->consumer;
    Apache__Rocketmq__V2__AckMessageRequest req = APACHE__ROCKETMQ__V2__ACK_MESSAGE_REQUEST__INIT;
    Apache__Rocketmq__V2__AckMessageEntry *store, **entries;
    mql_pb_resource group, topic;
    mql_call *call;
    size_t i, n = 0;
    const char *topic_name = NULL, *lite;
    char parent[MQL_TOPIC_NAME_MAX];
    mql_result r;
    store = mql_xcalloc(rel->n, sizeof(*store));
    entries = mql_xcalloc(rel->n, sizeof(*entries));
    for (i = 0; i < rel->n; i++) {
        mql_lease *l;
        if (rel->settled[i]) continue;
        l = mql_lease_find(&cs->leases, rel->ids[i]);
        apache__rocketmq__v2__ack_message_entry__init(&store[n]);
        store[n].message_id = l->message_id;
        store[n].receipt_handle = l->handle;   /* the newest: renewals are done by now */
        entries[n] = &store[n];
        /* a lite lease: the parent as the request's topic, its lite topic per entry */
        topic_name = mql_lite_split(mql_lease_topic(&cs->leases, l), parent, sizeof(parent), &lite);
        store[n].lite_topic = (char *)lite;
        n++;
    }
    mql_set_resource(&group, c->namespace_, cs->group);
    mql_set_resource(&topic, c->namespace_, topic_name);
    req.group = &group;
    req.topic = &topic;
    req.n_entries = n;
    req.entries = entries;
    call = mql_base_call(c, c->broker, MQL_M_ACK, c->request_timeout_ms, &ack_ops, rel->op, rel);
    if (mql_base_unary(c, call, &req.base) < 0) {
        mql_result_fail(&r, "INTERNAL", "ack: grpc refused to start the call");
        for (i = 0; i < rel->n; i++) {
            /* an entry settled already (BUSY: another release owns that lease) is
             * not ours to resume */
            if (rel->settled[i]) continue;
            release_settle_lease(c, rel, i, mql_lease_find(&cs->leases, rel->ids[i]), &r);
        }
        release_post(c, rel);
        release_free(rel);
    }
    free(store);
    free(entries);
}

static void on_ack_done(mql_client *c, mql_call *call) {
    mql_release *rel = call->ctx;
    mql_result top, r;
    Apache__Rocketmq__V2__AckMessageResponse *resp =
        mql_call_reply(call, &apache__rocketmq__v2__ack_message_response__descriptor, &top);
    const mql_ack_entry **match = mql_xcalloc(rel->n, sizeof(*match));
    int answered = resp && call->status == GRPC_STATUS_OK;
    size_t i;
    if (answered) mql_ack_match(&c->consumer.leases, rel->ids, rel->settled, rel->n, resp, match);
    for (i = 0; i < rel->n; i++) {
        mql_lease *l;
        if (rel->settled[i]) continue;
        /* no renewal runs while a release is pending: the lease still holds
         * the handle this ack sent */
        l = mql_lease_find(&c->consumer.leases, rel->ids[i]);
        r = top;
        if (!l) {
            /* ended by the safety net while the reply was late: its one outcome
             * is already told (LOST); an "ok" now would be a second one */
            mql_result_fail(&r, "LEASE_LOST", "the lease ended before the ack's reply came");
        } else if (answered && match[i]) {
            mql_result_from_status(&r, match[i]->status, "AckMessage");
        } else if (answered && !(resp->n_entries == 0 && !top.ok)) {
            /* (no entry at all under an error: the proxy refused the whole
             * request, flow control or validation, and its code stands) */
            mql_result_fail(&r, "PROTOCOL", "AckMessage: no entry answered this message");
        }
        release_settle_lease(c, rel, i, l, &r);
    }
    free(match);
    mql_call_reply_free(resp);
    call->ctx = NULL;
    release_post(c, rel);
    release_free(rel);
}

/* One lease of a nack or a dead letter: the proxy has no batch form of
 * either, so a release of n leases is n calls, each answering for its entry. */
typedef struct lease_part {
    mql_release *rel;
    size_t i;
} lease_part;

typedef int (*lease_call_fn)(mql_client *c, const mql_release *rel, mql_lease *l, void *ctx);

static void part_settle(mql_client *c, mql_release *rel, size_t i, const mql_result *r) {
    release_settle_lease(c, rel, i, mql_lease_find(&c->consumer.leases, rel->ids[i]), r);
    if (release_done(rel)) {
        release_post(c, rel);
        release_free(rel);
    }
}

/* Starts one call per unsettled lease of rel with start(). */
static void send_each(mql_client *c, mql_release *rel, lease_call_fn start, const char *what) {
    size_t i, left = 0;
    mql_result r;
    mql_result_fail(&r, "INTERNAL", "%s: grpc refused to start the call", what);
    for (i = 0; i < rel->n; i++) left += !rel->settled[i];
    /* A refused start settles its entry at once, and the last settle frees
     * rel: stop touching it once every entry is sent or settled. */
    for (i = 0; left > 0; i++) {
        lease_part *part;
        if (rel->settled[i]) continue;
        left--;
        part = mql_xmalloc(sizeof(*part));
        part->rel = rel;
        part->i = i;
        if (start(c, rel, mql_lease_find(&c->consumer.leases, rel->ids[i]), part) < 0) {
            free(part);
            part_settle(c, rel, i, &r);
        }
    }
}

/* The reply of one lease's call settles its entry. */
static void part_done(mql_client *c, mql_call *call, const ProtobufCMessageDescriptor *desc) {
    lease_part *part = call->ctx;
    mql_result r;
    void *resp = mql_call_reply(call, desc, &r);
    /* ended by the safety net while the reply was late (as in on_ack_done):
     * its one outcome is already told (LOST); an "ok" now would be a second */
    if (!mql_lease_find(&c->consumer.leases, part->rel->ids[part->i]))
        mql_result_fail(&r, "LEASE_LOST", "the lease ended before the reply came");
    part_settle(c, part->rel, part->i, &r);
    free(part);
    call->ctx = NULL;
    mql_call_reply_free(resp);
}

static int nack_start(mql_client *c, const mql_release *rel, mql_lease *l, void *ctx) {
    return mql_change_start(c, l, rel->delay_ms, &nack_ops, 0, ctx);
}

static void on_nack_done(mql_client *c, mql_call *call) {
    part_done(c, call, &apache__rocketmq__v2__change_invisible_duration_response__descriptor);
}

static int dead_letter_start(mql_client *c, const mql_release *rel, mql_lease *l, void *ctx) {
    Apache__Rocketmq__V2__ForwardMessageToDeadLetterQueueRequest req =
        APACHE__ROCKETMQ__V2__FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE_REQUEST__INIT;
    mql_pb_resource group, topic;
    char parent[MQL_TOPIC_NAME_MAX];
    const char *lite;
    (void)rel;
    mql_set_resource(&group, c->namespace_, c->consumer.group);
    mql_set_resource(&topic, c->namespace_,
                     mql_lite_split(mql_lease_topic(&c->consumer.leases, l), parent,
                                    sizeof(parent), &lite));
    req.lite_topic = (char *)lite;
    req.group = &group;
    req.topic = &topic;
    req.receipt_handle = l->handle;
    req.message_id = l->message_id;
    return mql_base_unary(c, mql_base_call(c, c->broker, MQL_M_DLQ, c->request_timeout_ms,
                                           &dead_letter_ops, 0, ctx),
                          &req.base);
}

static void on_dead_letter_done(mql_client *c, mql_call *call) {
    part_done(c, call,
              &apache__rocketmq__v2__forward_message_to_dead_letter_queue_response__descriptor);
}

/* Whether rel waits for the session's reconnect, and if so arms each of its
 * leases' timers at the latest moment it may go out.
 *
 * While the session moves to another proxy (c->reconnecting: the new channel
 * is open, our settings are on their way or not yet sent), that proxy has no
 * Telemetry channel for our client id. RocketMQ 5.2.0's proxy then fails
 * an AckMessage or ChangeInvisibleDuration with INTERNAL_SERVER_ERROR: its
 * ReceiptHandleGroupKey.getChannelId dereferences the channel that
 * GrpcChannelManager.getChannel(clientId) did not find (NullPointerException).
 * A failed ack lets its lease expire on purpose (it may have landed), so the
 * message would run again; a failed nack or dead letter would come back late.
 * So a release waits for the settings to come back (on_telemetry_message
 * runs the deferred list), about a second after the old proxy died.
 *
 * It waits at most one request timeout, as long as a renewal in flight may
 * keep it waiting (what a drain's deadline counts on), and never past what
 * its leases allow: the earliest deadline minus what a call on the new
 * channel needs. Then it goes out as it always did: it may well work, and if
 * not, its lease expires as any failed release's does. A proxy that is down
 * for longer (a restart) costs what it cost before, no more. Never held:
 * nack_all's (close and the signal watcher must not wait for a proxy that may
 * not come back), and anything once stopping. A session still STARTING holds
 * no lease, so only a READY one reconnects. */
static int release_held(mql_client *c, mql_release *rel) {
    int64_t now = mql_now_ms(), need, send_by;
    size_t i;
    if (!c->reconnecting || c->stopping || rel->no_hold) return 0;
    need = mql_change_new_channel_needs_ms(c);
    send_by = (rel->held ? rel->held_at : now) + c->request_timeout_ms;
    for (i = 0; i < rel->n; i++) {
        mql_lease *l;
        if (rel->settled[i]) continue;
        l = mql_lease_find(&c->consumer.leases, rel->ids[i]);
        if (l && l->deadline_ms - need < send_by) send_by = l->deadline_ms - need;
    }
    if (now >= send_by) return 0;
    /* a need grown past this one would bring send_by forward (run_lease) */
    if (!c->consumer.held_need_ms || need < c->consumer.held_need_ms)
        c->consumer.held_need_ms = need;
    for (i = 0; i < rel->n; i++) {
        mql_lease *l;
        if (rel->settled[i]) continue;
        l = mql_lease_find(&c->consumer.leases, rel->ids[i]);
        if (l) mql_lease_arm(&c->consumer.leases, l, send_by);
    }
    if (!rel->held) {
        c->metrics.releases_held++;
        rel->held = 1;
        rel->held_at = now;
    }
    return 1;
}

/* A held release when the client closes: it fails CLOSED at once (its
 * leases expire at their deadlines) rather than wait for a proxy nobody will
 * talk to again. */
static void release_fail_closed(mql_client *c, mql_release *rel) {
    mql_result r;
    size_t i;
    mql_result_fail(&r, "CLOSED", "the consumer closed while its session was reconnecting");
    for (i = 0; i < rel->n; i++)
        if (!rel->settled[i])
            release_settle_lease(c, rel, i, mql_lease_find(&c->consumer.leases, rel->ids[i]), &r);
    release_post(c, rel);
    release_free(rel);
}

/* Whether rel stays deferred: one of its leases is being renewed, or it is
 * held for the session's reconnect (release_held). */
static int release_waits(mql_client *c, mql_release *rel) {
    size_t i;
    for (i = 0; i < rel->n; i++) {
        mql_lease *l;
        if (rel->settled[i]) continue;
        l = mql_lease_find(&c->consumer.leases, rel->ids[i]);
        if (l && l->state == MQL_LEASE_RENEWING) return 1;
    }
    return !release_done(rel) && release_held(c, rel);
}

/* Sends rel, which waits no more, or ends it; rel is not ours after. */
static void release_go(mql_client *c, mql_release *rel) {
    if (rel->held && c->stopping && !release_done(rel)) {
        release_fail_closed(c, rel);
    } else if (release_done(rel)) {
        release_post(c, rel);
        release_free(rel);
    } else if (rel->is_ack) {
        ack_send(c, rel);
    } else if (rel->dead_letter) {
        send_each(c, rel, dead_letter_start, "dead_letter");
    } else {
        send_each(c, rel, nack_start, "nack");
    }
}

/* A deferred release looked at again: it goes if it waits no more. Going
 * touches no other release, so the list's next link stays valid. */
static void release_retry(mql_client *c, mql_release *rel) {
    c->consumer.deferred_looked_at++;
    if (release_waits(c, rel)) return;
    release_leave(c, rel);
    release_go(c, rel);
}

void mql_release_run_deferred(mql_client *c) {
    mql_deferred_link *link, *next;
    /* each one still held is armed again below, with today's need */
    c->consumer.held_need_ms = 0;
    for (link = c->consumer.deferred.head; link; link = next) {
        next = link->next;
        release_retry(c, MQL_RELEASE_OF(link));
    }
}

/* A held release's timer is armed at the latest moment it may go out,
 * reckoned with the need of a call on a new channel (K x the renewals' p99
 * plus a connection's setup). Slower renewals raise it and bring that moment
 * forward for every held release at once: then all are looked at again, so
 * none goes out later than its leases allow. A smaller need only leaves a
 * timer early, which finds its release still held and arms it again. */
void mql_release_run_lease(mql_client *c, uint64_t lease_id) {
    mql_deferred_link *link;
    if (c->consumer.held_need_ms &&
        mql_change_new_channel_needs_ms(c) > c->consumer.held_need_ms) {
        mql_release_run_deferred(c);
        return;
    }
    link = mql_deferred_find(&c->consumer.deferred, lease_id);
    if (link) release_retry(c, MQL_RELEASE_OF(link));
}

/* What a release does: one of these, with the fields a dead letter needs. */
typedef struct release_kind {
    int is_ack, dead_letter, silent;
    const char *reason;
    int no_hold;
} release_kind;

static const release_kind ACK = {1, 0, 0, NULL, 0}, NACK = {0, 0, 0, NULL, 0},
                          NACK_ALL = {0, 0, 0, NULL, 1};

static uint64_t release_start(mql_client *c, const uint64_t *ids, size_t n, release_kind k,
                              int64_t delay_ms) {
    mql_release *rel = mql_xcalloc(1, sizeof(*rel));
    mql_result r;
    uint64_t op;
    size_t i;
    int is_ack = k.is_ack || k.dead_letter;   /* for the pending mark below */
    rel->op = k.silent ? 0 : ++c->next_op;
    rel->is_ack = k.is_ack;
    rel->dead_letter = k.dead_letter;
    rel->silent = k.silent;
    rel->no_hold = k.no_hold;
    snprintf(rel->reason, sizeof(rel->reason), "%s", k.reason ? k.reason : "");
    rel->delay_ms = delay_ms;
    rel->n = n;
    rel->ids = mql_xcalloc(n, sizeof(*rel->ids));
    rel->entries = mql_xcalloc(n, sizeof(*rel->entries));
    rel->settled = mql_xcalloc(n, sizeof(*rel->settled));
    for (i = 0; i < n; i++) {
        mql_lease *l = mql_lease_find(&c->consumer.leases, ids[i]);
        rel->ids[i] = ids[i];
        if (c->stopping) {
            mql_result_fail(&r, "CLOSED", "the consumer is closed");
            settle(c, rel, i, &r);
        } else if (!l) {
            mql_result_fail(&r, "NO_LEASE", "no lease %llu: already acked, nacked or lost",
                            (unsigned long long)ids[i]);
            settle(c, rel, i, &r);
        } else if (l->pending != MQL_PENDING_NONE) {
            mql_result_fail(&r, "BUSY", "a release of this lease is already under way");
            settle(c, rel, i, &r);
        } else {
            /* from now on nothing renews it: the release decides its fate */
            l->pending = is_ack ? MQL_PENDING_ACK : MQL_PENDING_NACK;
            if (l->state != MQL_LEASE_RENEWING)
                mql_lease_arm(&c->consumer.leases, l, l->deadline_ms);
        }
    }
    op = rel->op;   /* rel may be gone once sent */
    if (release_waits(c, rel))
        mql_deferred_add(&c->consumer.deferred, &rel->link, rel->ids, rel->settled, rel->n);
    else
        release_go(c, rel);
    return op;
}

uint64_t mql_release_ack(mql_client *c, const uint64_t *lease_ids, size_t n) {
    return release_start(c, lease_ids, n, ACK, 0);
}

uint64_t mql_release_nack(mql_client *c, uint64_t lease_id, int64_t delay_ms) {
    return release_start(c, &lease_id, 1, NACK, delay_ms);
}

uint64_t mql_release_dead_letter(mql_client *c, uint64_t lease_id, const char *reason) {
    release_kind k = {0, 1, 0, reason && *reason ? reason : "handler", 0};
    return release_start(c, &lease_id, 1, k, 0);
}

void mql_release_unseen(mql_client *c, mql_lease *l, int dead_letter, int64_t delay_ms,
                        const char *reason) {
    release_kind k = {0, dead_letter, 1, reason, 0};
    release_start(c, &l->id, 1, k, delay_ms);
}

void mql_release_undelivered(mql_client *c, const mql_event *ev) {
    size_t i;
    c->metrics.events_dropped++;
    for (i = 0; i < ev->nmsgs; i++) {
        mql_lease *l = mql_lease_find(&c->consumer.leases, ev->msgs[i].lease_id);
        /* back after corrupt_delay, as any message the host never saw: at
         * once, a consumer that cannot take it would spin on it */
        if (l && l->pending == MQL_PENDING_NONE)
            mql_release_unseen(c, l, 0, c->consumer.corrupt_delay_ms, "undelivered");
    }
}

int mql_release_let_expire(mql_client *c, uint64_t lease_id) {
    mql_consumer_part *cs = &c->consumer;
    mql_lease *l = mql_lease_find(&cs->leases, lease_id);
    if (!l || l->pending != MQL_PENDING_NONE) return 0;
    l->let_go = 1;
    if (l->state == MQL_LEASE_HELD) l->state = MQL_LEASE_EXPIRING;
    if (l->state != MQL_LEASE_RENEWING) mql_lease_arm(&cs->leases, l, l->deadline_ms);
    return 1;
}

static void collect_held(mql_lease *l, void *ud) {
    struct { uint64_t *ids; size_t n; } *acc = ud;
    if (l->pending == MQL_PENDING_NONE) acc->ids[acc->n++] = l->id;
}

uint64_t mql_release_nack_all(mql_client *c, int64_t delay_ms) {
    mql_consumer_part *cs = &c->consumer;
    struct { uint64_t *ids; size_t n; } acc;
    uint64_t op;
    acc.ids = mql_xcalloc(cs->leases.count, sizeof(uint64_t));
    acc.n = 0;
    mql_lease_each(&cs->leases, collect_held, &acc);
    /* from now on a message a receive still brings is given back at once */
    cs->nacked_all = 1;
    cs->nacked_all_delay_ms = delay_ms;
    op = release_start(c, acc.ids, acc.n, NACK_ALL, delay_ms);
    free(acc.ids);
    return op;
}

void mql_release_drop_deferred(mql_client *c) {
    mql_deferred_link *link, *next;
    for (link = c->consumer.deferred.head; link; link = next) {
        next = link->next;
        release_free(MQL_RELEASE_OF(link));
    }
    mql_deferred_free(&c->consumer.deferred);
}
