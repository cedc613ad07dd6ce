/* mql_compat.h -- the few Lua 5.4 API points lmqlease.c uses, for Lua 5.1/LuaJIT too. */
#ifndef MQL_COMPAT_H
#define MQL_COMPAT_H

#include <lauxlib.h>
#include <lua.h>

#if LUA_VERSION_NUM < 502
#define luaL_newlib(L, l) (lua_newtable(L), luaL_register(L, NULL, l))
#define luaL_setfuncs(L, l, n) luaL_register(L, NULL, l)
#define lua_rawlen(L, i) lua_objlen(L, i)
static void *mql_testudata(lua_State *L, int i, const char *tname) {
    void *p = lua_touserdata(L, i);
    if (!p || !lua_getmetatable(L, i)) return NULL;
    luaL_getmetatable(L, tname);
    if (!lua_rawequal(L, -1, -2)) p = NULL;
    lua_pop(L, 2);
    return p;
}
#define luaL_testudata(L, i, t) mql_testudata(L, i, t)
#define lua_setuservalue(L, i) lua_setfenv(L, i)
#endif

#endif /* MQL_COMPAT_H */
