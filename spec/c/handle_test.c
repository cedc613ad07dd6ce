/* handle_test.c -- the receipt handle after ChangeInvisibleDuration
 * (mql_handle_after_change, upstream #9583) and the event queue, without a
 * server. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "mql_codec.h"
#include "mql_events.h"
#include "mql_test.h"

static int same(char *got, const char *want) {
    int ok = strcmp(got, want) == 0;
    if (!ok) fprintf(stderr, "  got '%s', want '%s'\n", got, want);
    free(got);
    return ok;
}

static void points_field_zero_at_the_message_offset(void) {
    /* 5.2.0's 10-field handle: batch start 100, the message's own offset 103 */
    CHECK(same(mql_handle_after_change("100 1700000000000 30000 0 0 broker-a 2 103 7 4096"),
               "103 1700000000000 30000 0 0 broker-a 2 103 7 4096"));
}

static void leaves_a_consistent_handle_alone(void) {
    CHECK(same(mql_handle_after_change("103 1700000000000 30000 0 0 broker-a 2 103 7 4096"),
               "103 1700000000000 30000 0 0 broker-a 2 103 7 4096"));
}

static void leaves_handles_of_another_shape_alone(void) {
    CHECK(same(mql_handle_after_change(""), ""));
    CHECK(same(mql_handle_after_change("opaque-handle"), "opaque-handle"));
    CHECK(same(mql_handle_after_change("1 2 3 4 5 6 7 x8 9"), "1 2 3 4 5 6 7 x8 9"));
    CHECK(same(mql_handle_after_change("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17"),
               "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17"));
}

/* Field 7 is the message's queue offset: an empty one (two spaces) is no
 * offset, so the handle is not the proxy's and stays as it came. It was
 * taken for one, and field 0 was replaced by nothing. */
static void leaves_a_handle_without_an_offset_alone(void) {
    CHECK(same(mql_handle_after_change("100 1700000000000 30000 0 0 broker-a 2  7 4096"),
               "100 1700000000000 30000 0 0 broker-a 2  7 4096"));
}

/* The new handle of a change names the message the old one names (broker,
 * queue, offset: fields 5 to 7), whatever else changed; where the old one
 * is opaque there is nothing to compare. */
static void tells_whether_two_handles_name_one_message(void) {
    const char *old = "100 1700000000000 30000 0 0 broker-a 2 103 7 4096";
    CHECK(mql_handle_names_message("100 1700000031000 30000 0 0 broker-a 2 103 7 4096", old));
    CHECK(mql_handle_names_message("103 1700000031000 60000 1 0 broker-a 2 103 7", old));
    CHECK(!mql_handle_names_message("100 1700000031000 30000 0 0 broker-a 2 104 7 4096", old));
    CHECK(!mql_handle_names_message("100 1700000031000 30000 0 0 broker-a 3 103 7 4096", old));
    CHECK(!mql_handle_names_message("100 1700000031000 30000 0 0 broker-b 2 103 7 4096", old));
    CHECK(!mql_handle_names_message("100 1700000031000 30000 0 0 broker-a 2 1030 7 4096", old));
    CHECK(!mql_handle_names_message("opaque", old));
    CHECK(mql_handle_names_message("anything", "opaque-handle"));
}

static int readable(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

static void hands_events_over_in_order_and_takes_them_back(void) {
    mql_events q;
    mql_event *list, *ev;
    uint64_t i, ops[3] = {0, 0, 0};
    CHECK(mql_events_init(&q) == 0);
    CHECK(!readable(q.fd));
    for (i = 1; i <= 3; i++) mql_events_push(&q, mql_event_new(MQL_EV_OP, i));
    CHECK(readable(q.fd));
    list = mql_events_take(&q);
    CHECK(!readable(q.fd));
    /* the host could not take them: back in front, readable again */
    mql_events_push(&q, mql_event_new(MQL_EV_OP, 4));
    mql_events_requeue(&q, list);
    CHECK(readable(q.fd));
    list = mql_events_take(&q);
    for (i = 0, ev = list; ev && i < 3; ev = ev->next) ops[i++] = ev->op;
    CHECK(ops[0] == 1 && ops[1] == 2 && ops[2] == 3);
    CHECK(ev && ev->op == 4 && ev->next == NULL);
    while (list) {
        ev = list->next;
        mql_event_free(list);
        list = ev;
    }
    mql_events_destroy(&q);
}

int main(void) {
    RUN(points_field_zero_at_the_message_offset);
    RUN(leaves_a_consistent_handle_alone);
    RUN(leaves_handles_of_another_shape_alone);
    RUN(leaves_a_handle_without_an_offset_alone);
    RUN(tells_whether_two_handles_name_one_message);
    RUN(hands_events_over_in_order_and_takes_them_back);
    return TEST_REPORT("handle_test");
}
