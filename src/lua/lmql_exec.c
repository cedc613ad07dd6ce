/* lmql_exec.c -- core.exec: replace this process with another program.
 *
 * `mqlease devbroker` runs mqlease-devbroker in its own place (execvp), so the
 * pid a service manager or a shell holds is the broker's, and a SIGTERM sent
 * to it reaches the broker itself instead of a wrapper that would die and
 * leave its child behind. On success exec does not return; on failure the
 * process is untouched and it returns nil, message, code (the errno name).
 */
#include "lmqlease.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXEC_MAX_ARGS 256

static const char *errno_code(int e) {
    switch (e) {
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case ENOEXEC: return "ENOEXEC";
    case E2BIG: return "E2BIG";
    case ENOMEM: return "ENOMEM";
    case ENOTDIR: return "ENOTDIR";
    case ELOOP: return "ELOOP";
    case ETXTBSY: return "ETXTBSY";
    }
    return "EXEC_FAILED";
}

/* core.exec({program, arg1, ...}) -> never returns | nil, message, code.
 * argv[1] is looked up on PATH when it has no slash (execvp). A wrong argv
 * (not a list of strings, empty, too long) raises. */
int lmql_exec(lua_State *L) {
    const char *argv[EXEC_MAX_ARGS + 1];
    lua_Integer n, i;
    int e;
    luaL_checktype(L, 1, LUA_TTABLE);
    n = (lua_Integer)lua_rawlen(L, 1);
    luaL_argcheck(L, n >= 1, 1, "the argument list is empty");
    luaL_argcheck(L, n <= EXEC_MAX_ARGS, 1, "more than 256 arguments");
    for (i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "exec: argument %d must be a string (got %s)", (int)i,
                              luaL_typename(L, -1));
        /* the table keeps the string alive: it stays on the stack below */
        argv[i - 1] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    argv[n] = NULL;
    execvp(argv[0], (char *const *)argv);
    e = errno;
    lua_pushnil(L);
    lua_pushfstring(L, "cannot run %s: %s", argv[0], strerror(e));
    lua_pushstring(L, errno_code(e));
    return 3;
}
