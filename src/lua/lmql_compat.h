/* lmql_compat.h -- the few Lua 5.4 API points the binding uses (lmqlease.c,
 * lmql_redis.c, lmql_signals.c), for Lua 5.1 and LuaJIT 2.1 too (LuaJIT
 * already has some of the 5.2 ones: only what is missing is defined). The
 * binding's, not the core's: hence lmql_, like its other files. Every file of
 * src/lua sees lua.h through it (lmqlease.h includes it). */
#ifndef LMQL_COMPAT_H
#define LMQL_COMPAT_H

#include <lauxlib.h>
#include <lua.h>

#if LUA_VERSION_NUM < 502
#ifndef luaL_newlib
#define luaL_newlib(L, l) (lua_newtable(L), luaL_register(L, NULL, l))
#endif
#if !defined(LUAJIT_VERSION_NUM) && !defined(luaL_setfuncs)
#define luaL_setfuncs(L, l, n) luaL_register(L, NULL, l)
#endif
#define lua_rawlen(L, i) lua_objlen(L, i)
/* 5.1 keeps a userdata's companion table as its environment */
#define lua_setuservalue(L, i) lua_setfenv(L, i)
#endif

#endif /* LMQL_COMPAT_H */
