/* lmql_exec.c -- core.exec: replace this process with another program;
 * core.spawn and core.reap: start a child that dies with this process, and
 * collect its end.
 *
 * `mqlease devbroker` runs mqlease-devbroker in its own place (execvp), so the
 * pid a service manager or a shell holds is the broker's, and a SIGTERM sent
 * to it reaches the broker itself instead of a wrapper that would die and
 * leave its child behind. On success exec does not return; on failure the
 * process is untouched and it returns nil, message, code (the errno name).
 *
 * mqlease.launch starts its servers and the lab's workers with core.spawn: a
 * direct child, asked by prctl(PR_SET_PDEATHSIG, SIGKILL) to be killed when
 * the thread that forked it ends (prctl(2)) -- the Lua thread, which lives as
 * long as the process -- so a launcher killed with SIGKILL, which runs no
 * cleanup, takes its servers with it instead of leaving them holding their
 * ports and their leases. A child stays a zombie until core.reap collects it,
 * so its pid cannot be given to another process before its launcher knows
 * it ended.
 */
#include "lmqlease.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
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
    case EAGAIN: return "EAGAIN";
    case ECHILD: return "ECHILD";
    case EISDIR: return "EISDIR";
    case EROFS: return "EROFS";
    case ENOSPC: return "ENOSPC";
    }
    return "EXEC_FAILED";
}

/* Reads the argument list at index 1 into argv (NULL-terminated); raises on
 * a wrong one. The strings stay alive in the table. */
static void check_argv(lua_State *L, const char *argv[EXEC_MAX_ARGS + 1], const char *fn) {
    lua_Integer n, i;
    luaL_checktype(L, 1, LUA_TTABLE);
    n = (lua_Integer)lua_rawlen(L, 1);
    luaL_argcheck(L, n >= 1, 1, "the argument list is empty");
    luaL_argcheck(L, n <= EXEC_MAX_ARGS, 1, "more than 256 arguments");
    for (i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: argument %d must be a string (got %s)", fn, (int)i, luaL_typename(L, -1));
        argv[i - 1] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    argv[n] = NULL;
}

/* core.exec({program, arg1, ...}) -> never returns | nil, message, code.
 * argv[1] is looked up on PATH when it has no slash (execvp). A wrong argv
 * (not a list of strings, empty, too long) raises. */
int lmql_exec(lua_State *L) {
    const char *argv[EXEC_MAX_ARGS + 1];
    int e;
    check_argv(L, argv, "exec");
    execvp(argv[0], (char *const *)argv);
    e = errno;
    lua_pushnil(L);
    lua_pushfstring(L, "cannot run %s: %s", argv[0], strerror(e));
    lua_pushstring(L, errno_code(e));
    return 3;
}

static int push_failure(lua_State *L, const char *what, const char *name, int e) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s %s: %s", what, name, strerror(e));
    lua_pushstring(L, errno_code(e));
    return 3;
}

static void write_text(int fd, const char *text) {
    ssize_t r = write(fd, text, strlen(text));
    (void)r;   /* the child is about to _exit: nobody to tell */
}

/* What the forked child does until execvp; only async-signal-safe calls
 * (fork(2): the parent may have other threads). */
static void spawned_child(const char *const *argv, pid_t parent, int in, int out) {
    sigset_t none;
    int sig;
    /* ends with the forking thread (prctl(2)); a parent that died before
     * this call left the child to another: it must not run at all */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
    /* its own process group: a terminal's ^C reaches the launcher only,
     * whose end ends the child */
    setpgid(0, 0);
    /* a signal the parent ignores or blocks stays so across execve
     * (signal(7)): a child that ignores SIGTERM could never be stopped */
    for (sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(127);
    close_range(3, ~0U, 0);
    execvp(argv[0], (char *const *)argv);
    write_text(2, "cannot run ");
    write_text(2, argv[0]);
    write_text(2, "\n");
    _exit(127);
}

/* core.spawn({program, arg1, ...}, out) -> pid | nil, message, code.
 * The child's stdin is /dev/null, its stdout and stderr the file out
 * (truncated); it runs in a process group of its own with every signal at
 * its default, and is killed with SIGKILL when this process ends. A program
 * that cannot run writes "cannot run PROGRAM" to out and exits with 127. */
int lmql_spawn(lua_State *L) {
    const char *argv[EXEC_MAX_ARGS + 1];
    const char *out_path;
    int in, out, e;
    pid_t pid, parent = getpid();
    check_argv(L, argv, "spawn");
    out_path = luaL_checkstring(L, 2);
    in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0) return push_failure(L, "cannot open", "/dev/null", errno);
    out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (out < 0) {
        e = errno;
        close(in);
        return push_failure(L, "cannot open", out_path, e);
    }
    pid = fork();
    if (pid == 0) spawned_child(argv, parent, in, out);
    e = errno;
    close(in);
    close(out);
    if (pid < 0) return push_failure(L, "cannot start", argv[0], e);
    lua_pushinteger(L, (lua_Integer)pid);
    return 1;
}

/* core.reap(pid) -> false (it runs) | "exit", status | "signal", signo |
 * nil, message, "ECHILD" (no child of this process: never one, or reaped
 * already). It never waits. */
int lmql_reap(lua_State *L) {
    lua_Integer want = luaL_checkinteger(L, 1);
    int status = 0;
    pid_t got;
    luaL_argcheck(L, want > 0, 1, "a pid must be positive");
    do {
        got = waitpid((pid_t)want, &status, WNOHANG);
    } while (got < 0 && errno == EINTR);
    if (got < 0) return push_failure(L, "cannot reap", lua_tostring(L, 1), errno);
    if (got == 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (WIFSIGNALED(status)) {
        lua_pushliteral(L, "signal");
        lua_pushinteger(L, WTERMSIG(status));
    } else {
        lua_pushliteral(L, "exit");
        lua_pushinteger(L, WEXITSTATUS(status));
    }
    return 2;
}
