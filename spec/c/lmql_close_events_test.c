/* lmql_close_events_test.c -- client:events() when the client is closed while
 * its events are being made into Lua values, on a Lua 5.4 state of its own
 * (no server: the consumer's endpoint points nowhere).
 *
 * Making the events allocates, so the collector may run finalizers in the
 * middle of client:events(), and a finalizer may close the very client being
 * read: a consumer dropped without close() closes its client from its __gc.
 * If the Lua heap is exhausted after that, the events that cannot be made are
 * handed to the client's hooks (mql_client_event_dropped), which used the
 * client's pointer taken before the push: memory the close had freed. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdlib.h>

#include "budget_alloc.h"
#include "lmqlease.h"
#include "mql_test.h"

LUALIB_API int luaopen_mqlease_core(lua_State *L);

/* starve(): from now on the heap cannot grow (the finalizer calls it). */
static int starve(lua_State *L) {
    void *ud;
    lua_getallocf(L, &ud);
    ((budget *)ud)->limit = 0;
    return 0;
}

/* Returns client.events, client, and a guard whose __gc closes the client and
 * starves the heap; two refused receives wait as events. */
static const char *setup =
    "local core, starve = ...\n"
    "local client = core.consumer { endpoint = '127.0.0.1:1', group = 'g', topic = 't' }\n"
    "client:receive(1, 0)\n"
    "client:receive(1, 0)\n"
    "local guard = setmetatable({}, { __gc = function() client:close(); starve() end })\n"
    "return client.events, client, guard\n";

static void a_client_closed_by_a_finalizer_during_events_is_not_used_after(void) {
    budget b = {0, (size_t)64 << 20};
    lua_State *L = lua_newstate(budget_alloc, &b);
    int rc;
    luaL_openlibs(L);
    CHECK(luaL_loadstring(L, setup) == LUA_OK);
    lua_pushcfunction(L, luaopen_mqlease_core);
    lua_call(L, 0, 1);
    lua_pushcfunction(L, starve);
    rc = lua_pcall(L, 2, 3, 0);
    CHECK(rc == LUA_OK);
    if (rc != LUA_OK) {
        fprintf(stderr, "  %s\n", lua_tostring(L, -1));
        lua_close(L);
        return;
    }
    CHECK(lua_checkstack(L, 100));
    /* A finished cycle: the next one starts from nothing marked, so the guard
     * dropped below is garbage in it. Each step then runs a whole cycle (pause
     * 1 %, a step size past any debt), its finalizers included: the first
     * allocation in events() collects the guard. */
    lua_gc(L, LUA_GCCOLLECT);
    lua_gc(L, LUA_GCINC, 1, 100, 100);
    lua_gc(L, LUA_GCSTOP);
    lua_pop(L, 1);   /* the guard */
    lua_pushvalue(L, -1);
    lua_rotate(L, -3, 1);   /* client, events, client */
    lua_gc(L, LUA_GCRESTART);
    rc = lua_pcall(L, 1, 1, 0);   /* events(client) */
    b.limit = (size_t)64 << 20;
    CHECK(rc == LUA_OK);   /* before: a heap-use-after-free of the closed client */
    /* the finalizer ran inside events(): the client is closed now */
    lua_getfield(L, -2, "closed");
    lua_pushvalue(L, -3);
    lua_call(L, 1, 1);
    CHECK(lua_toboolean(L, -1));
    lua_close(L);
}

int main(void) {
    RUN(a_client_closed_by_a_finalizer_during_events_is_not_used_after);
    return TEST_REPORT("lmql_close_events_test");
}
