#!/usr/bin/env bash
# make demo [BROKER=devbroker|rocketmq]: the dev broker (default; no JVM needed)
# or a real RocketMQ on loopback, a redis-server, and examples/demo/demo.lua.
# The examples load mqlease like any installed module; from a checkout, LUA_PATH
# and LUA_CPATH point at its lua/ and build/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;;" LUA_CPATH="$PWD/build/?.so;;"
BROKER=${BROKER:-devbroker}
topic="demo_$(date +%s)"
dv_pid=""
cleanup() {
  [[ -n $dv_pid ]] && kill "$dv_pid" 2>/dev/null || true
  bash spec/support/redis.sh stop >/dev/null || true
  [[ $BROKER == rocketmq ]] && bash spec/support/rocketmq.sh stop >/dev/null || true
}
trap cleanup EXIT
bash spec/support/redis.sh start >/dev/null
REDIS="127.0.0.1:${MQLEASE_REDIS_PORT:-16379}"
case $BROKER in
  devbroker)
    out=$(mktemp)
    build/mqlease-devbroker --listen 127.0.0.1:0 --topic "$topic" >"$out" 2>&1 &
    dv_pid=$!
    for _ in $(seq 50); do grep -q listening "$out" && break; sleep 0.1; done
    ENDPOINTS=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$out")
    rm -f "$out"
    [[ -n $ENDPOINTS ]] || { echo "demo: the dev broker did not start" >&2; exit 1; }
    echo "demo: mqlease-devbroker on $ENDPOINTS, redis on $REDIS" ;;
  rocketmq)
    bash spec/support/rocketmq.sh start
    eval "$(bash spec/support/rocketmq.sh env)"
    ENDPOINTS=$MQLEASE_ENDPOINTS
    bash spec/support/rocketmq.sh topics "$topic" >/dev/null
    echo "demo: RocketMQ on $ENDPOINTS, redis on $REDIS" ;;
  *) echo "demo: BROKER must be devbroker or rocketmq" >&2; exit 2 ;;
esac
lua5.4 examples/demo/demo.lua "$ENDPOINTS" "$topic" "$REDIS"
