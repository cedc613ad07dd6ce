/* renew_hold_test.c -- renewals while the session moves to another proxy,
 * without a server (client_fixture.h).
 *
 * Issue 33 item 6: renewals were not held during a reconnect, only releases
 * were. Sent before the new proxy had our settings they failed on 5.2.0's
 * missing Telemetry channel (INTERNAL_SERVER_ERROR, a NullPointerException
 * in ReceiptHandleGroupKey), or on the dead proxy the session had just left
 * (UNAVAILABLE), spending the lease's time in retries. A renewal due in that
 * window now waits for the settings, as a release does, unless its lease
 * cannot wait: then it goes out at once, as before. */
#include "client_fixture.h"
#include "mql_test.h"

#include <signal.h>
#include <unistd.h>

/* A ready client holding one lease with remaining_ms left, due to renew now,
 * whose session has lost its proxy (`reconnecting`); returns the lease. */
static mql_lease *setup(mql_client *c, int64_t remaining_ms) {
    mql_lease *l = fixture_reconnecting_lease(c, remaining_ms, -1);
    mql_backoff_init(&c->reconnect, 200, 10000);
    return l;
}

static int renewing(const mql_client *c) {
    return c->calls && strcmp(c->calls->method, MQL_M_CHANGE) == 0;
}

static void a_renewal_due_while_reconnecting_waits_for_the_settings(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    int64_t now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(!renewing(&c));                                   /* held */
    CHECK(l->state == MQL_LEASE_HELD);
    /* at the latest, a request timeout and a new channel's need before the deadline */
    CHECK(l->timer_ms == l->deadline_ms - mql_change_new_channel_needs_ms(&c) - 3000);
    CHECK(fixture_reconnect_completes(&c));
    CHECK(!c.reconnecting);
    CHECK(l->timer_ms <= mql_now_ms());                     /* due again */
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(renewing(&c));
    CHECK(l->state == MQL_LEASE_RENEWING);
    fixture_teardown(&c);
}

static void a_renewal_whose_lease_cannot_wait_goes_out_at_once(void) {
    mql_client c;
    mql_lease *l = setup(&c, 3500);   /* less than request_timeout + a new channel's need */
    int64_t now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(renewing(&c));
    CHECK(l->state == MQL_LEASE_RENEWING);
    fixture_teardown(&c);
}

/* The held renewal's timer, come while the session still reconnects: it goes out. */
static void a_held_renewal_goes_out_at_its_latest_moment(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    int64_t now = mql_now_ms(), at;
    mql_renew_timers(&c, now, now + 60000);
    CHECK(!renewing(&c));
    at = l->timer_ms;
    mql_renew_timers(&c, at, at + 60000);
    CHECK(renewing(&c));
    fixture_teardown(&c);
}

static void on_alarm(int sig) {
    static const char msg[] = "renew_hold_test: mql_renew_timers never returned\n";
    (void)sig;
    if (write(2, msg, sizeof(msg) - 1) < 0) _exit(2);
    _exit(1);
}

/* A renewal is taken up to the pacing slack early (mql_renew_timers). One
 * whose latest moment falls inside that slack was held and re-armed at that
 * moment, which the same pass took up again at once: the C thread spun under
 * the client's lock, its list of held renewals growing, and every call of the
 * host waited on the lock (the chaos spec's proxy restart, seen as "no ack
 * after the restart"). It goes out now, and the pass returns. */
static void a_renewal_whose_latest_moment_is_within_the_slack_goes_out(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    int64_t now = mql_now_ms(), slack = mql_pace_slack_ms(&c.consumer.pace);
    CHECK(slack >= 2);
    l->deadline_ms = now + mql_change_new_channel_needs_ms(&c) + 3000 + slack / 2;
    signal(SIGALRM, on_alarm);
    alarm(10);
    mql_renew_timers(&c, now, now + 60000);
    alarm(0);
    CHECK(renewing(&c));
    CHECK(l->state == MQL_LEASE_RENEWING);
    CHECK(c.consumer.nrenew_held == 0);
    fixture_teardown(&c);
}

int main(void) {
    RUN(a_renewal_due_while_reconnecting_waits_for_the_settings);
    RUN(a_renewal_whose_lease_cannot_wait_goes_out_at_once);
    RUN(a_held_renewal_goes_out_at_its_latest_moment);
    RUN(a_renewal_whose_latest_moment_is_within_the_slack_goes_out);
    return TEST_REPORT("renew_hold_test");
}
