#!/usr/bin/env bash
# make demo [BROKER=devbroker|rocketmq]: examples/demo/demo.lua on the dev broker (default; no
# JVM needed), which it starts itself with a redis-server (mqlease.launch), or on a real
# RocketMQ on loopback started here. The examples load mqlease like any installed module; from
# a checkout, LUA_PATH and LUA_CPATH point at its lua/ and build/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;;" LUA_CPATH="$PWD/build/?.so;;"
BROKER=${BROKER:-devbroker}
case $BROKER in
  devbroker)
    lua5.4 examples/demo/demo.lua ;;
  rocketmq)
    topic="demo_$(date +%s)"
    trap 'bash mk/rocketmq.sh stop >/dev/null || true' EXIT
    bash mk/rocketmq.sh start
    eval "$(bash mk/rocketmq.sh env)"
    bash mk/rocketmq.sh topics "$topic" >/dev/null
    echo "demo: RocketMQ on $MQLEASE_ENDPOINTS"
    lua5.4 examples/demo/demo.lua "$MQLEASE_ENDPOINTS" "$topic" ;;
  *) echo "demo: BROKER must be devbroker or rocketmq" >&2; exit 2 ;;
esac
