#!/usr/bin/env bash
# make bench: mqlease against the official Java client (rocketmq-client-java 5.0.7), same
# broker, same run, same machine. Starts a real RocketMQ on loopback (stopped afterwards),
# runs each mode of bench/bench.lua and bench/java/Bench.java, and prints a Markdown table
# (also written to bench/results.md).
#
# BENCH_COUNT (2000) messages of BENCH_SIZE (1024) bytes; BENCH_HOLD leases (200) held
# BENCH_HOLD_S (25) seconds with a 10 s invisible duration; BENCH_HOLD_BIG (1000) leases for
# mqlease's renewal lateness at scale.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
COUNT=${BENCH_COUNT:-2000}
SIZE=${BENCH_SIZE:-1024}
HOLD=${BENCH_HOLD:-200}
HOLD_S=${BENCH_HOLD_S:-25}
HOLD_BIG=${BENCH_HOLD_BIG:-1000}
OUT=${BENCH_OUT:-bench/results.md}

trap 'bash spec/support/rocketmq.sh stop >/dev/null || true' EXIT
bash spec/support/rocketmq.sh start
bash bench/java.sh fetch >/dev/null
eval "$(bash spec/support/rocketmq.sh env)"
E=$MQLEASE_ENDPOINTS
R=b$(date +%s)
bash spec/support/rocketmq.sh topics "${R}_lp" "${R}_jp" "${R}_lh" "${R}_jh" "${R}_lb" >/dev/null
results=$(mktemp)

lua() { lua5.4 bench/bench.lua "$@"; }
java() { bash bench/java.sh run "$@"; }
note() { echo "bench: $*" >&2; }

# produce, then consume the backlog (a fresh group on a fresh topic starts at offset 0)
note "produce $COUNT x $SIZE B"
{ echo "lua $(lua produce "$E" "${R}_lp" "$COUNT" "$SIZE")"; } >>"$results"
{ echo "java $(java produce "$E" "${R}_jp" "$COUNT" "$SIZE")"; } >>"$results"
note "consume $COUNT"
{ echo "lua $(lua consume "$E" "${R}_glc" "${R}_lp" "$COUNT" 30 32)"; } >>"$results"
{ echo "java $(java consume "$E" "${R}_gjc" "${R}_jp" "$COUNT" 30 32)"; } >>"$results"

# hold: the consumer waits for the messages, then keeps them all alive for HOLD_S
hold() { # who topic count
  local who=$1 topic=$2 n=$3 f
  f=$(mktemp)
  if [[ $who == lua ]]; then lua hold "$E" "${topic}_g" "$topic" "$n" 10 "$HOLD_S" >"$f" &
  else java hold "$E" "${topic}_g" "$topic" "$n" 10 "$HOLD_S" >"$f" & fi
  local pid=$!
  sleep 4
  lua produce "$E" "$topic" "$n" "$SIZE" >/dev/null
  wait $pid
  echo "$who $(cat "$f")" >>"$results"
  rm -f "$f"
}
note "hold $HOLD leases for $HOLD_S s"
hold lua "${R}_lh" "$HOLD"
hold java "${R}_jh" "$HOLD"
note "hold $HOLD_BIG leases (mqlease only)"
hold lua "${R}_lb" "$HOLD_BIG"

lua5.4 bench/table.lua "$results" "$COUNT" "$SIZE" "$HOLD" "$HOLD_S" "$HOLD_BIG" | tee "$OUT"
rm -f "$results"
