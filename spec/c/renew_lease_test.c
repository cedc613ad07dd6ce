/* renew_lease_test.c -- what a lease costs in the table, without a server: a
 * lease is one allocation with its message id, its topic is shared, and a
 * renewal's new handle replaces the old one without touching the rest. */
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
    CHECK(strcmp(c->topic, "refunds") == 0);
    CHECK(t.ntopics == 2);
    mql_lease_remove(&t, a);   /* the name outlives the lease that brought it */
    CHECK(strcmp(b->topic, "orders") == 0);
    mql_lease_table_free(&t);
}

static void a_new_handle_keeps_the_message_id(void) {
    mql_lease_table t;
    mql_lease *l;
    char *handle = strdup("renewed handle");
    mql_lease_table_init(&t);
    l = mql_lease_add(&t, "0A0B0C0D0E0F10111213141516171819", "orders", "first", 0, 1000);
    mql_lease_take_handle(l, handle);
    CHECK(l->handle == handle);
    CHECK(strcmp(l->message_id, "0A0B0C0D0E0F10111213141516171819") == 0);
    mql_lease_set_handle(l, "third");
    CHECK(strcmp(l->handle, "third") == 0);
    mql_lease_table_free(&t);
}

static void a_missing_message_id_or_topic_is_empty(void) {
    mql_lease_table t;
    mql_lease *l;
    mql_lease_table_init(&t);
    l = mql_lease_add(&t, NULL, NULL, NULL, 0, 1000);
    CHECK(strcmp(l->message_id, "") == 0);
    CHECK(strcmp(l->topic, "") == 0);
    CHECK(strcmp(l->handle, "") == 0);
    mql_lease_table_free(&t);
}

int main(void) {
    RUN(leases_of_one_topic_share_one_copy_of_its_name);
    RUN(a_new_handle_keeps_the_message_id);
    RUN(a_missing_message_id_or_topic_is_empty);
    return TEST_REPORT("renew_lease_test");
}
