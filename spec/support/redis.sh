#!/usr/bin/env bash
# The specs' shared redis-server on loopback: the shell entry run-specs.sh (and a spec that
# wants a Redis of its own to stop and start) call; mqlease.launch's redis_start and
# redis_stop do the work.
#
#   redis.sh start    start it (or reuse one that already answers PING on the port)
#   redis.sh stop     stop it, only if `start` started it
#   redis.sh status   exit 0 if PING is answered
#
# Environment (optional):
#   MQLEASE_REDIS_PORT  16379 (not the default 6379, so a developer's own Redis is left alone)
#   MQLEASE_REDIS_RUN   /tmp/mqlease-redis   (pid file, log, the started-by-us mark)
#
# mqlease.launch waits with mqlease.sleep, so it loads the module: build/ (make core), else the
# sanitizer build in build/san/ (make sanitize) with the ASan runtime preloaded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

PORT=${MQLEASE_REDIS_PORT:-16379}
RUN=${MQLEASE_REDIS_RUN:-/tmp/mqlease-redis}

die() { echo "redis: error: $*" >&2; exit 1; }

preload=${LD_PRELOAD:-}
if [[ -f build/mqlease/core.so ]]; then
  cpath="$PWD/build/?.so"
elif [[ -f build/san/mqlease/core.so ]]; then
  cpath="$PWD/build/san/?.so"
  preload=$(gcc -print-file-name=libasan.so)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
else
  die "no build of the module (build/mqlease/core.so or build/san/mqlease/core.so): run make core"
fi

# launch start|stop|status: mqlease.launch's redis_start, redis_stop or redis_answers on PORT
# (and RUN); prints what it did, or fails with its message. The lock's descriptor is closed
# for it, so a server it starts cannot hold the lock.
launch() {
  LD_PRELOAD=$preload LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;;" LUA_CPATH="$cpath;;" \
    lua5.4 - "$1" "$PORT" "$RUN" 9>&- <<'LUA'
local launch = require "mqlease.launch"
local what, port, run = arg[1], tonumber(arg[2]), arg[3]
if what == "status" then
  if launch.redis_answers(port) then print("redis: answering on 127.0.0.1:" .. port); os.exit(0) end
  io.stderr:write("redis: nothing answers on 127.0.0.1:", port, "\n"); os.exit(1)
end
local r, err = launch["redis_" .. what] { port = port, run = run }
if not r then io.stderr:write("redis: error: ", err, "\n"); os.exit(1) end
if type(r) == "string" then print("redis: " .. r)
elseif r.reused then print(("redis: reusing the Redis on %s"):format(r.address))
else print(("redis: started redis-server on %s (pid %d); run dir %s"):format(r.address, r.pid, run)) end
LUA
}

lock() {
  mkdir -p "$RUN"
  exec 9>"$RUN/.lock"
  flock -w 60 9 || die "timed out waiting for the lock $RUN/.lock"
}

case ${1:-} in
  start) lock; launch start ;;
  stop) lock; launch stop ;;
  status) launch status ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
