/* lmql_signals.c -- core.watch_signals: the SIGTERM/SIGINT watcher for Lua
 * (see mql_shutdown.h for what the watcher does when the host is stuck). */
#include "lmqlease.h"

#include <signal.h>
#include <string.h>

#include "mql_shutdown.h"


typedef struct lwatcher {
    mql_shutdown *s;
} lwatcher;

static int signal_number(const char *name) {
    if (strcmp(name, "TERM") == 0) return SIGTERM;
    if (strcmp(name, "INT") == 0) return SIGINT;
    if (strcmp(name, "HUP") == 0) return SIGHUP;
    if (strcmp(name, "QUIT") == 0) return SIGQUIT;
    return 0;
}

static const char *signal_name(int signo) {
    switch (signo) {
    case SIGTERM: return "TERM";
    case SIGINT: return "INT";
    case SIGHUP: return "HUP";
    case SIGQUIT: return "QUIT";
    }
    return NULL;
}

/* core.watch_signals({"TERM", "INT"}, {client, ...}, deadline_s, release_delay_s) -> watcher */
int lmql_watch_signals(lua_State *L) {
    int signals[8], nsignals = 0, nclients = 0, i, n;
    mql_client *clients[16];
    char err[128];
    lwatcher *w;
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    n = (int)lua_rawlen(L, 1);
    for (i = 1; i <= n && nsignals < 8; i++) {
        lua_rawgeti(L, 1, i);
        signals[nsignals] = signal_number(luaL_checkstring(L, -1));
        if (!signals[nsignals]) return luaL_error(L, "unknown signal '%s'", lua_tostring(L, -1));
        nsignals++;
        lua_pop(L, 1);
    }
    n = (int)lua_rawlen(L, 2);
    for (i = 1; i <= n && nclients < 16; i++) {
        lclient *lc;
        lua_rawgeti(L, 2, i);
        lc = luaL_checkudata(L, -1, CLIENT_MT);
        if (lc->c) clients[nclients++] = lc->c;
        lua_pop(L, 1);
    }
    w = lua_newuserdata(L, sizeof(*w));
    w->s = NULL;
    luaL_getmetatable(L, WATCHER_MT);
    lua_setmetatable(L, -2);
    w->s = mql_shutdown_new(signals, nsignals, clients, nclients,
                            (int64_t)(luaL_checknumber(L, 3) * 1000),
                            (int64_t)(luaL_checknumber(L, 4) * 1000), err, sizeof(err));
    if (!w->s) return luaL_error(L, "mqlease: %s", err);
    /* the clients must outlive the watcher: keep them referenced from it */
    lua_pushvalue(L, 2);
    lua_setuservalue(L, -2);
    return 1;
}

static mql_shutdown *check_watcher(lua_State *L) {
    lwatcher *w = luaL_checkudata(L, 1, WATCHER_MT);
    if (!w->s) luaL_error(L, "mqlease: the signal watcher is closed");
    return w->s;
}

static int l_watcher_fd(lua_State *L) {
    lua_pushinteger(L, mql_shutdown_fd(check_watcher(L)));
    return 1;
}

static int l_watcher_signal(lua_State *L) {
    const char *name = signal_name(mql_shutdown_signal(check_watcher(L)));
    if (name) lua_pushstring(L, name);
    else lua_pushnil(L);
    return 1;
}

static int l_watcher_done(lua_State *L) {
    mql_shutdown_done(check_watcher(L));
    return 0;
}

static int l_watcher_extend(lua_State *L) {
    mql_shutdown_extend(check_watcher(L), (int64_t)(luaL_checknumber(L, 2) * 1000));
    return 0;
}

static int l_watcher_close(lua_State *L) {
    lwatcher *w = luaL_checkudata(L, 1, WATCHER_MT);
    if (w->s) {
        mql_shutdown_free(w->s);
        w->s = NULL;
    }
    return 0;
}

static const luaL_Reg watcher_methods[] = {
    {"fd", l_watcher_fd}, {"signal", l_watcher_signal}, {"done", l_watcher_done},
    {"extend", l_watcher_extend},
    {"close", l_watcher_close}, {NULL, NULL}};


void lmql_open_signals(lua_State *L) {
    if (luaL_newmetatable(L, WATCHER_MT)) {
        lua_newtable(L);
        luaL_setfuncs(L, watcher_methods, 0);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_watcher_close);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
}
