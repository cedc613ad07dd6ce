/* lmql_clock.c -- the waits and clocks of mqlease.core: core.wait and
 * core.poll (poll(2) on descriptors, the only calls of the binding that block,
 * with core.sleep), core.now (the monotonic clock every deadline of the Lua
 * side is counted on) and core.wall (the wall clock, for the broker's times).
 */
#include "lmqlease.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <time.h>

/* poll's milliseconds for the timeout at arg (seconds; none or negative: no
 * limit, as is one past what an int holds, math.huge among them). A NaN
 * raises: cast to an int, it and a number past INT_MAX are undefined. */
static int poll_ms(lua_State *L, int arg) {
    lua_Number t = luaL_optnumber(L, arg, -1);
    luaL_argcheck(L, t == t, arg, "timeout: seconds expected, got NaN");
    if (t < 0 || t * 1000.0 >= (lua_Number)INT_MAX - 1) return -1;
    return (int)(t * 1000.0 + 0.5);
}

/* core.wait(fd, timeout_s) -> true when fd is readable, false on timeout.
 * The one place a plain script blocks; coroutines yield instead (lua/mqlease/loop). */
int lmql_wait(lua_State *L) {
    struct pollfd p;
    int ms = poll_ms(L, 2), rc;
    p.fd = (int)luaL_checkinteger(L, 1);
    p.events = POLLIN;
    p.revents = 0;
    do {
        rc = poll(&p, 1, ms);
    } while (rc < 0 && errno == EINTR && ms < 0);
    lua_pushboolean(L, rc > 0);
    return 1;
}

/* core.poll({fd, ...}, timeout_s) -> array of readable fds (empty on timeout). */
int lmql_poll(lua_State *L) {
    struct pollfd ps[256];
    size_t n, i;
    int k = 0, ms = poll_ms(L, 2);
    luaL_checktype(L, 1, LUA_TTABLE);
    n = lua_rawlen(L, 1);
    luaL_argcheck(L, n <= 256, 1, "at most 256 descriptors");
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 1, (int)i + 1);
        ps[i].fd = (int)luaL_checkinteger(L, -1);
        ps[i].events = POLLIN;
        ps[i].revents = 0;
        lua_pop(L, 1);
    }
    lua_newtable(L);
    if (poll(ps, (nfds_t)n, ms) > 0) {
        for (i = 0; i < n; i++) {
            if (ps[i].revents) {
                lua_pushinteger(L, ps[i].fd);
                lua_rawseti(L, -2, ++k);
            }
        }
    }
    return 1;
}

/* core.now() -> seconds on the monotonic clock, with milliseconds as fractions. */
int lmql_now(lua_State *L) {
    lua_pushnumber(L, (lua_Number)mql_now_ms() / 1000.0);
    return 1;
}

/* core.wall() -> seconds since the epoch (the wall clock, with milliseconds as
 * fractions): to compare with the broker's times, as born_at and store_at. */
int lmql_wall(lua_State *L) {
    lua_pushnumber(L, (lua_Number)mql_wall_ms() / 1000.0);
    return 1;
}

/* The longest nanosleep of one core.sleep step (11.6 days): a time_t cast of
 * more, math.huge among them, is undefined. */
#define SLEEP_STEP_S 1e6

/* core.sleep(s): blocks the whole VM, as a badly behaved handler would.
 * 0 or less returns at once; math.huge sleeps for ever; NaN raises. */
int lmql_sleep(lua_State *L) {
    lua_Number s = luaL_checknumber(L, 1);
    luaL_argcheck(L, s == s, 1, "seconds expected, got NaN");
    while (s > 0) {
        lua_Number step = s < SLEEP_STEP_S ? s : SLEEP_STEP_S;
        struct timespec ts;
        ts.tv_sec = (time_t)step;
        ts.tv_nsec = (long)((step - (lua_Number)ts.tv_sec) * 1e9);
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
        s -= step;   /* math.huge stays so */
    }
    return 0;
}
