/* renew_lease_test.c -- what a lease costs in the table, without a server: a
 * lease is one allocation with its message id and its receipt handle, its
 * topic is shared, and a renewal's new handle replaces the old one in place
 * without touching the rest. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mql_lease.h"
#include "mql_test.h"

static void leases_of_one_topic_share_one_copy_of_its_name(void) {
    mql_lease_table t;
    mql_lease *a, *b, *c;
    mql_lease_table_init(&t);
    a = mql_lease_add(&t, "id-a", "orders", "h1", 0, 1000);
    b = mql_lease_add(&t, "id-b", "orders", "h2", 0, 1000);
    c = mql_lease_add(&t, "id-c", "refunds", "h3", 0, 1000);
    CHECK(a->topic == b->topic);
    CHECK(strcmp(mql_lease_topic(&t, c), "refunds") == 0);
    CHECK(t.ntopics == 2);
    mql_lease_remove(&t, a);   /* the name outlives the lease that brought it */
    CHECK(strcmp(mql_lease_topic(&t, b), "orders") == 0);
    mql_lease_table_free(&t);
}

/* A proxy chooses the topic names (a hostile one can send a new one with every
 * message): past UINT16_MAX of them the table used to abort the process. Now
 * each lease still names its own topic, and the names kept for sharing are
 * bounded. */
static void many_distinct_topics_keep_working_and_stay_bounded(void) {
    enum { N = 70000 };
    static mql_lease *ls[N];
    mql_lease_table t;
    char name[32];
    int i, right = 0;
    mql_lease_table_init(&t);
    for (i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "topic-%d", i);
        ls[i] = mql_lease_add(&t, "id", name, "h", 0, 1000);
    }
    for (i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "topic-%d", i);
        if (strcmp(mql_lease_topic(&t, ls[i]), name) == 0) right++;
    }
    CHECK(right == N);
    CHECK(t.ntopics <= MQL_TOPICS_MAX);
    /* the first topics are still shared, and found again by name */
    CHECK(mql_lease_add(&t, "id", "topic-0", "h", 0, 1000)->topic == ls[0]->topic);
    for (i = 0; i < N; i += 2) mql_lease_remove(&t, ls[i]);
    CHECK(strcmp(mql_lease_topic(&t, ls[N - 1]), "topic-69999") == 0);
    mql_lease_table_free(&t);
}

/* the handle lies inside the lease's own allocation */
static int handle_inline(const mql_lease *l, size_t id_len, size_t first_handle_len) {
    const char *start = (const char *)l;
    return l->handle > start && l->handle < start + mql_lease_alloc_size(id_len, first_handle_len);
}

static void a_new_handle_keeps_the_message_id(void) {
    mql_lease_table t;
    mql_lease *l;
    char *handle = strdup("renewed");
    mql_lease_table_init(&t);
    l = mql_lease_add(&t, "0A0B0C0D0E0F10111213141516171819", "orders", "first", 0, 1000);
    mql_lease_take_handle(l, handle);   /* copied in place and freed (ASan sees a leak else) */
    CHECK(strcmp(l->handle, "renewed") == 0);
    CHECK(strcmp(l->message_id, "0A0B0C0D0E0F10111213141516171819") == 0);
    mql_lease_set_handle(l, "third");
    CHECK(strcmp(l->handle, "third") == 0);
    mql_lease_table_free(&t);
}

/* One allocation per lease, whatever its handle does: a million leases are a
 * million records, not two million. The fixed part stays within 96 bytes. */
static void a_lease_is_one_allocation_with_its_id_and_handle(void) {
    const char *id = "0A0B0C0D0E0F10111213141516171819";
    const char *first = "dv 0 0 917 1000001 123456789";
    mql_lease_table t;
    mql_lease *l;
    char longer[128];
    mql_lease_table_init(&t);
    l = mql_lease_add(&t, id, "orders", first, 0, 1000);
    CHECK(offsetof(mql_lease, message_id) <= 96);
    CHECK(mql_lease_alloc_size(strlen(id), strlen(first)) ==
          offsetof(mql_lease, message_id) + strlen(id) + 1 + strlen(first) + 1 + MQL_HANDLE_SLACK);
    CHECK(handle_inline(l, strlen(id), strlen(first)));
    CHECK(strcmp(l->handle, first) == 0);
    /* a renewal's handle a counter's few digits longer is still copied in place */
    mql_lease_set_handle(l, "dv 0 0 917 100000001 1234567890");
    CHECK(handle_inline(l, strlen(id), strlen(first)));
    CHECK(strcmp(l->handle, "dv 0 0 917 100000001 1234567890") == 0);
    CHECK(strcmp(l->message_id, id) == 0);
    /* one that outgrows the room gets its own allocation, and the next short one comes back */
    memset(longer, 'h', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    mql_lease_take_handle(l, strdup(longer));
    CHECK(!handle_inline(l, strlen(id), strlen(first)));
    CHECK(strcmp(l->handle, longer) == 0);
    mql_lease_set_handle(l, "short");
    CHECK(handle_inline(l, strlen(id), strlen(first)));
    CHECK(strcmp(l->handle, "short") == 0);
    CHECK(strcmp(l->message_id, id) == 0);
    mql_lease_table_free(&t);
}

static void a_missing_message_id_or_topic_is_empty(void) {
    mql_lease_table t;
    mql_lease *l;
    mql_lease_table_init(&t);
    l = mql_lease_add(&t, NULL, NULL, NULL, 0, 1000);
    CHECK(strcmp(l->message_id, "") == 0);
    CHECK(strcmp(mql_lease_topic(&t, l), "") == 0);
    CHECK(strcmp(l->handle, "") == 0);
    mql_lease_table_free(&t);
}

/* A million leases pay for every byte of the fixed fields: 74 with no padding
 * (86 when the topic was a pointer and the renewal's send time 64 bits). */
static void the_fixed_fields_take_74_bytes(void) {
    CHECK(offsetof(mql_lease, message_id) == 74);
}

static void the_renewal_send_time_is_kept_after_the_receive(void) {
    mql_lease_table t;
    mql_lease *l;
    mql_lease_table_init(&t);
    l = mql_lease_add(&t, "id", "t", "h", 1000000000000, 30000);
    mql_lease_set_renew_sent(l, 1000000000000 + 7 * 24 * 3600 * 1000LL);   /* max_lease */
    CHECK(mql_lease_renew_sent_ms(l) == 1000000000000 + 7 * 24 * 3600 * 1000LL);
    mql_lease_set_renew_sent(l, 999999999000);   /* never before the receive */
    CHECK(mql_lease_renew_sent_ms(l) == 1000000000000);
    mql_lease_table_free(&t);
}

int main(void) {
    RUN(leases_of_one_topic_share_one_copy_of_its_name);
    RUN(many_distinct_topics_keep_working_and_stay_bounded);
    RUN(a_new_handle_keeps_the_message_id);
    RUN(a_lease_is_one_allocation_with_its_id_and_handle);
    RUN(a_missing_message_id_or_topic_is_empty);
    RUN(the_fixed_fields_take_74_bytes);
    RUN(the_renewal_send_time_is_kept_after_the_receive);
    return TEST_REPORT("renew_lease_test");
}
