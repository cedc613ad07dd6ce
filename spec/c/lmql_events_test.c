/* lmql_events_test.c -- the binding's event lists (lmql_push.c) on a Lua 5.4
 * state whose allocator refuses past a budget, without a server.
 *
 * Issue 20 item 10: an event that could not be turned into Lua values (here,
 * a received message whose body does not fit the VM's memory) made
 * client:events() put the whole list back and raise; the next call took the
 * same list and raised again, for good: every later result, and so every
 * coroutine waiting for one, was stuck behind it. Now each event is turned
 * into a table on its own: one that fails is skipped, handed to the owner's
 * hook (which counts it and gives its leases back), and its waiter still gets
 * an answer, an INTERNAL error; the events around it are delivered. */
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>

#include "budget_alloc.h"
#include "lmqlease.h"
#include "mql_test.h"

static mql_event *op_event(uint64_t op, mql_event *next) {
    mql_event *ev = mql_event_new(MQL_EV_OP, op);
    mql_result_ok(&ev->result);
    ev->next = next;
    return ev;
}

/* A receive's result with one message of body_len bytes (lease 7). */
static mql_event *receive_event(uint64_t op, size_t body_len, mql_event *next) {
    mql_event *ev = op_event(op, next);
    mql_message *m = calloc(1, sizeof(*m));
    m->id = strdup("MSG-1");
    m->topic = strdup("t");
    m->receipt_handle = strdup("h");
    m->body = calloc(1, body_len);
    m->body_len = body_len;
    m->lease_id = 7;
    ev->msgs = m;
    ev->nmsgs = 1;
    return ev;
}

static int dropped_ops, dropped_leases;

static void on_dropped(void *owner, mql_event *ev) {
    size_t i;
    (void)owner;
    dropped_ops++;
    for (i = 0; i < ev->nmsgs; i++) dropped_leases += ev->msgs[i].lease_id == 7;
}

static int push_list(lua_State *L) {
    lmql_event_hooks hooks = {NULL, on_dropped};
    lmql_push_events(L, lua_touserdata(L, 1), &hooks, NULL);
    return 1;
}

/* t[i].field as a string ("" if absent). */
static const char *field(lua_State *L, int i, const char *name) {
    const char *s;
    lua_rawgeti(L, -1, i);
    lua_getfield(L, -1, name);
    s = lua_isstring(L, -1) ? lua_tostring(L, -1) : "";
    lua_pop(L, 2);   /* the string stays alive in the table */
    return s;
}

static void one_event_that_does_not_fit_is_skipped_and_the_rest_delivered(void) {
    budget b = {0, 1 << 20};   /* 1 MiB for the whole VM */
    lua_State *L = lua_newstate(budget_alloc, &b);
    mql_event *list = op_event(1, receive_event(2, 4 << 20, op_event(3, NULL)));
    int rc;
    dropped_ops = dropped_leases = 0;
    lua_pushcfunction(L, push_list);
    lua_pushlightuserdata(L, list);
    rc = lua_pcall(L, 1, 1, 0);
    CHECK(rc == LUA_OK);   /* before: "not enough memory", and the list put back */
    if (rc == LUA_OK) {
        CHECK(lua_istable(L, -1) && lua_rawlen(L, -1) == 3);
        CHECK(strcmp(field(L, 1, "op"), "1") == 0);
        /* the receive's waiter is answered: an error, never silence */
        CHECK(strcmp(field(L, 2, "op"), "2") == 0);
        CHECK(strcmp(field(L, 2, "code"), "INTERNAL") == 0);
        CHECK(strstr(field(L, 2, "err"), "memory") != NULL);
        CHECK(strcmp(field(L, 3, "op"), "3") == 0);
    }
    CHECK(dropped_ops == 1);      /* counted once, by the owner */
    CHECK(dropped_leases == 1);   /* who gives its lease back */
    lua_close(L);
}

int main(void) {
    RUN(one_event_that_does_not_fit_is_skipped_and_the_rest_delivered);
    return TEST_REPORT("lmql_events_test");
}
