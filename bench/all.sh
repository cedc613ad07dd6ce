#!/usr/bin/env bash
# make bench: two parts, one Markdown report (printed, and written to bench/results.md).
#
# 1. mqlease against the official Java client (rocketmq-client-java 5.0.7), same broker,
#    same run, same machine: a real RocketMQ on loopback (stopped afterwards if this script
#    started it), each mode of bench/bench.lua and bench/java/Bench.java.
#    BENCH_COUNT (2000) messages of BENCH_SIZE (1024) bytes; BENCH_HOLD leases (200) held
#    BENCH_HOLD_S (25) seconds with a 10 s invisible duration; BENCH_HOLD_BIG (1000) leases
#    for mqlease's renewal lateness at scale. BENCH_RUNS runs of everything (3), medians
#    with min-max, each run on fresh topics.
# The dev broker (build/mqlease-devbroker) and redis-server are started here on free loopback
# ports by mqlease.launch (bench/servers.lua) and stopped at the end.
# 2. Lease scale on the dev broker (build/mqlease-devbroker, started here on a free port):
#    1,000 / 10,000 / 100,000 / 1,000,000 leases held by one consumer (bench/lease.lua),
#    and 10,000 while the Lua VM spins 5 s; BENCH_RUNS runs of each (3), medians with
#    min-max; the dev broker's RSS and CPU per renewal beside the client's.
#    Rate and CPU are measured in a window that opens at the first renewal (half a period
#    later for rows whose renewals come in bursts) and lasts two renewal periods (80 s at
#    invisible 120 s, 40 s at 60 s, 20 s at 30 s; QUICK: one, for every row).
#    BENCH_LEASES ("1000 10000 100000 1000000"; QUICK: without 1000000) picks the rows.
#    Then mqlease.run with a no-op handler over BENCH_RUN_COUNT (20000) pre-loaded
#    messages of BENCH_SIZE bytes.
# 5. Workers ("workers", on its own dev broker): 1, 2, 4 and 8 processes (BENCH_WORKERS;
#    QUICK: 1 2 4) each running mqlease.run with a no-op handler in one group over one
#    pre-loaded backlog of BENCH_WORKERS_COUNT (40000; QUICK: 10000) 100-byte messages,
#    started together (bench/workers.lua); msg/s of all of them, client and broker CPU.
# Part 1 also runs that throughput case on RocketMQ against the Java PushConsumer and
# SimpleConsumer (CPU seconds per 10,000 messages of each client process), and mqlease.run
# once more under the exactly-once policy (the bench's redis-server) over a backlog of its own:
# what exactly-once costs where the broker is the bound (part eo prices it where the client is).
#
# jcost: beside each lease row of part 2 (BENCH_JAVA_LEASES: 1000 10000 100000) and each
#    workers row of part 5 up to 4 workers, the same row for the Java client on the same dev
#    broker (bench/java/Bench.java leases and drain), for the "Cost as work grows" table:
#    client CPU per renewal and per message, RSS per lease, the dev broker's CPU beside each.
#    It runs inside parts lease and workers (name them too). Not in QUICK=1.
# BENCH_PARTS picks what runs: "lease" (part 2), "replay" (part 3), "eo" (part 4),
# "workers" (part 5), "jcost" (above), "send" (sends in flight, below), "brokers" (below),
# "throughput" and "java" (part 1: the backlog throughput, and the produce/consume/hold
# table); default all nine.
# 3. The incident replay (bench/replay.lua) on its own dev broker: four scenarios (fixed
#    window, 10x window, renewal + exactly-once, invisible = "auto" + exactly-once), three
#    workers, one killed; BENCH_RUNS runs one after another. REPLAY_PRODUCE (20 s) of
#    sending at REPLAY_RATE (380 msg/s), REPLAY_DRAIN (40 s) at most for the rest.
# 4. Exactly-once ("eo"): mqlease.run with a no-op handler over BENCH_EO_COUNT (20000; QUICK
#    5000) pre-loaded messages of BENCH_SIZE bytes on its own dev broker, plain and with
#    mqlease.policy.exactly_once on the Redis of part 3 (the same one), one after the
#    other in each of BENCH_RUNS runs: msg/s, client (and its main thread's), redis-server and
#    dev broker CPU per message; then "bound", plain once more beside bench/eo_load.lua sending
#    the policy's scripts to that Redis at 3/4 of the run's plain rate (and, not under QUICK=1,
#    "bound_onekey", the same with bench/eo_onekey.lua's probe of a leaner layout); then the policy's own CPU per message against stand-in messages, and by part (its two batched calls, a park and a wake, the keepalive, one round trip alone: bench/eo_policy.lua), and
#    the redis-server's CPU per message by part of the policy's scripts (bench/eo_parts.lua).
# brokers: 1, 2, 4 worker processes of mqlease.run over two brokers of a real RocketMQ cluster
#    (bench/brokers.sh: its own namesrv, broker-a, broker-b and two cluster-mode proxies);
#    msg/s, client CPU and the servers' CPU per message. Not in QUICK=1 (five JVMs boot).
# send: mqlease one at a time, from coroutines and by send_many, and the Java client's
#    sendAsync, on the real RocketMQ (bench/bench.lua send, Bench.java sendasync).
# QUICK=1 is BENCH_PARTS="lease workers replay eo send" with one run per row, no 1,000,000
# lease row and no 8 workers, the four replay scenarios side by side, 6 s of sending and at
# most 12 s more, and part send on the dev broker without the JVM (under 4 minutes on 2 cores).
# BENCH_RAW=DIR keeps the raw JSON lines (DIR/results, DIR/leases, DIR/replay, DIR/eo, DIR/send;
# appended), so rows of several invocations can be tabled together: BENCH_EO=DIR/eo
# BENCH_SEND=DIR/send BENCH_REPLAY=DIR/replay lua5.4
# bench/table.lua DIR/results 2000 1024 200 25 1000 DIR/leases.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
COUNT=${BENCH_COUNT:-2000}
SIZE=${BENCH_SIZE:-1024}
HOLD=${BENCH_HOLD:-200}
HOLD_S=${BENCH_HOLD_S:-25}
HOLD_BIG=${BENCH_HOLD_BIG:-1000}
OUT=${BENCH_OUT:-bench/results.md}
QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then RUNS=${BENCH_RUNS:-1}; PARTS=${BENCH_PARTS:-lease workers replay eo send}
else RUNS=${BENCH_RUNS:-3}; PARTS=${BENCH_PARTS:-lease workers jcost replay eo send brokers throughput java}; fi
part() { [[ " $PARTS " == *" $1 "* ]]; }
ROCKETMQ=0
if [[ $QUICK == 1 ]]; then LEASES=${BENCH_LEASES:-1000 10000 100000}; WORKERS=${BENCH_WORKERS:-1 2 4}
else LEASES=${BENCH_LEASES:-1000 10000 100000 1000000}; WORKERS=${BENCH_WORKERS:-1 2 4 8}; fi
WORKERS_COUNT=${BENCH_WORKERS_COUNT:-$([[ $QUICK == 1 ]] && echo 10000 || echo 40000)}
# the lease rows the Java client holds beside mqlease's (part jcost): a million takes a 6 GiB
# heap and minutes of its fill and acks a run, so it is asked for by name
JAVA_LEASES=${BENCH_JAVA_LEASES:-1000 10000 100000}
RUN_COUNT=${BENCH_RUN_COUNT:-20000}

note() { echo "bench: [$(date -u +%T)] $*" >&2; }
results=$(mktemp)
lease_results=$(mktemp)
replay_results=$(mktemp)
export BENCH_REPLAY=$replay_results   # bench/table.lua adds the replay table from it
eo_results=$(mktemp)
export BENCH_EO=$eo_results           # ... and the exactly-once table from this
send_results=$(mktemp)
export BENCH_SEND=$send_results       # and the sends-in-flight table from this one
brokers_results=$(mktemp)
export BENCH_BROKERS=$brokers_results # and the two-broker workers table from this one
DV_PID=
REDIS_PID=
cleanup() {
  stop_devbroker
  if [[ -n $REDIS_PID ]]; then kill "$REDIS_PID" 2>/dev/null || true; rm -f "$REDIS_OUT"; fi
  if ((ROCKETMQ)); then bash mk/rocketmq.sh stop >/dev/null || true; fi
  if [[ -n ${BENCH_RAW:-} ]]; then
    mkdir -p "$BENCH_RAW"
    cat "$results" >>"$BENCH_RAW/results"
    cat "$lease_results" >>"$BENCH_RAW/leases"
    cat "$replay_results" >>"$BENCH_RAW/replay"
    cat "$eo_results" >>"$BENCH_RAW/eo"
    cat "$send_results" >>"$BENCH_RAW/send"
    cat "$brokers_results" >>"$BENCH_RAW/brokers"
  fi
  rm -f "$results" "$lease_results" "$replay_results" "$eo_results" "$send_results" "$brokers_results"
}
trap cleanup EXIT

# ---- part 2 (first: it needs no JVM) -------------------------------------------------
# row: lease count, invisible s, hold s, spin s. The hold is measured from a renewal period
# after the fill (two when the fill took longer than a period), when every lease renews once
# a period at its own phase (src/lease/mql_pace.h; bench/lease.lua says why).
lease_row() { # n invisible hold spin run
  local n=$1 inv=$2 hold=$3 spin=$4 run=$5 topic
  topic="lease_${n}_${spin}_${run}_$RANDOM"
  printf 'topic %s\n' "$topic" | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$DV_CONTROL; cat >&3; head -n1 <&3" >/dev/null
  lua5.4 bench/lease.lua load "$DV" "$topic" "$n" >/dev/null
  echo "lease {\"row\":\"$n/$spin\",\"run\":$run,$(BENCH_BROKER_PID=$DV_PID lua5.4 bench/lease.lua hold "$DV" "$topic" "$n" "$inv" "$hold" "$spin" | sed 's/^{//')" >>"$lease_results"
}
# jlease_row n invisible hold run: the Java client (bench/java/Bench.java leases) holding n
# leases on the same dev broker, renewing them with changeInvisibleDurationAsync, 512 in
# flight as mqlease keeps; the same window as lease_row's (hold s, a renewal period after the
# fill). Its heap is sized to the row (-Xmx; its RSS per lease is the heap as the JVM grew it).
jlease_row() {
  local n=$1 inv=$2 hold=$3 run=$4 topic heap out
  topic="jlease_${n}_${run}_$RANDOM"
  printf 'topic %s\n' "$topic" | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$DV_CONTROL; cat >&3; head -n1 <&3" >/dev/null
  lua5.4 bench/lease.lua load "$DV" "$topic" "$n" >/dev/null
  if ((n >= 1000000)); then heap=6g; elif ((n >= 100000)); then heap=1g; else heap=256m; fi
  out=$(BENCH_BROKER_PID=$DV_PID MQLEASE_JAVA_TIMEOUT=1200 MQLEASE_JAVA_OPTS="-Xms32m -Xmx$heap -XX:+UseSerialGC" \
    bash bench/java.sh run leases "$DV" "${topic}_g" "$topic" "$n" "$inv" "$hold" 512 || true)
  if [[ $out == "{"* ]]; then
    echo "jlease {\"row\":\"$n\",\"run\":$run,\"invisible_s\":$inv,\"hold_s\":$hold,${out#\{}" >>"$lease_results"
  else
    note "the Java client's $n-lease row printed no result (run $run)"
  fi
}
# start_devbroker [ARGS...]: a dev broker on free loopback ports; sets DV_PID, DV
# (its gRPC address) and DV_CONTROL (its control port). stop_devbroker stops it.
start_devbroker() {
eval "$(lua5.4 bench/servers.lua devbroker "$@")"
}
stop_devbroker() {
if [[ -n $DV_PID ]]; then
  kill "$DV_PID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$DV_PID" 2>/dev/null || break; sleep 0.1; done
  rm -f "$DV_OUT"
  DV_PID=
fi
}
# start_redis: a redis-server on a free loopback port, once; sets REDIS_PID, REDIS.
start_redis() {
[[ -n $REDIS_PID ]] || eval "$(lua5.4 bench/servers.lua redis)"
}
part_lease() {
start_devbroker
for run in $(seq "$RUNS"); do
  for n in $LEASES; do
    # hold: the window, two renewal periods (2 x invisible / 3)
    if ((n >= 1000000)); then inv=120; hold=80; elif ((n >= 100000)); then inv=60; hold=40; else inv=30; hold=20; fi
    if [[ $QUICK == 1 ]]; then hold=$((hold / 2)); fi   # one renewal period
    note "lease scale: $n leases, invisible $inv s, hold $hold s (run $run/$RUNS)"
    lease_row "$n" "$inv" "$hold" 0 "$run"
    if part jcost && [[ " $JAVA_LEASES " == *" $n "* ]]; then
      note "lease scale, the Java client beside: $n leases, invisible $inv s, hold $hold s (run $run/$RUNS)"
      jlease_row "$n" "$inv" "$hold" "$run"
    fi
  done
  note "blocked VM: 10000 leases, invisible 10 s, Lua spins 5 s (run $run/$RUNS)"
  lease_row 10000 10 10 5 "$run"
  topic="run_${run}_$RANDOM"
  printf 'topic %s\n' "$topic" | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$DV_CONTROL; cat >&3; head -n1 <&3" >/dev/null
  note "mqlease.run, no-op handler: $RUN_COUNT x $SIZE B (run $run/$RUNS)"
  lua5.4 bench/lease.lua load "$DV" "$topic" "$RUN_COUNT" "$SIZE" >/dev/null
  echo "run $(lua5.4 bench/bench.lua run "$DV" "${topic}_g" "$topic" "$RUN_COUNT")" >>"$lease_results"
done
stop_devbroker
}
if part lease; then part_lease; fi

# ---- part 5: workers ------------------------------------------------------------------
# workers_row W RUN: W processes of bench/workers.lua over one backlog, started together
# once all have built their consumers; one "workers" line per process.
workers_row() {
  local w=$1 run=$2 who=${3:-lua} topic go i pids=() bcpu0 bcpu1 dir
  topic="workers_${who}_${w}_${run}_$RANDOM"
  dir=$(mktemp -d)
  go=$dir/go
  printf 'topic %s\n' "$topic" | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$DV_CONTROL; cat >&3; head -n1 <&3" >/dev/null
  lua5.4 bench/lease.lua load "$DV" "$topic" "$WORKERS_COUNT" 100 >/dev/null
  for i in $(seq "$w"); do
    if [[ $who == lua ]]; then lua5.4 bench/workers.lua "$DV" "${topic}_g" "$topic" "$go" 1 >"$dir/$i.json" &
    else bash bench/java.sh run drain "$DV" "${topic}_g" "$topic" "$go" 1 >"$dir/$i.json" & fi
    pids+=($!)
  done
  # each builds its consumer meanwhile (a JVM takes seconds to)
  if [[ $who == lua ]]; then sleep 1; else sleep $((3 + 2 * w)); fi
  bcpu0=$(awk '{print $14 + $15}' "/proc/$DV_PID/stat")
  touch "$go"
  for i in "${pids[@]}"; do wait "$i" || true; done
  bcpu1=$(awk '{print $14 + $15}' "/proc/$DV_PID/stat")
  for i in $(seq "$w"); do
    if [[ $(cat "$dir/$i.json") != "{"* ]]; then note "worker $i of $w ($who) printed no result (run $run)"; continue; fi
    echo "$([[ $who == lua ]] && echo workers || echo jworkers) {\"workers\":$w,\"run\":$run,\"backlog\":$WORKERS_COUNT,\"broker_ticks\":$((bcpu1 - bcpu0)),$(sed 's/^{//' "$dir/$i.json")" >>"$lease_results"
  done
  rm -rf "$dir"
}
part_workers() {
start_devbroker
for run in $(seq "$RUNS"); do
  for w in $WORKERS; do
    note "workers: $w processes of mqlease.run over $WORKERS_COUNT messages (run $run/$RUNS)"
    workers_row "$w" "$run"
    if part jcost && ((w <= 4)); then
      note "workers, the Java client beside: $w SimpleConsumer processes over $WORKERS_COUNT messages (run $run/$RUNS)"
      workers_row "$w" "$run" java
    fi
  done
done
stop_devbroker
}
if part workers; then part_workers; fi

# ---- part 3: the incident replay ------------------------------------------------------
part_replay() {
local produce=${REPLAY_PRODUCE:-20} rate=${REPLAY_RATE:-380} dir s run pid pids
[[ $QUICK == 1 ]] && { produce=${REPLAY_PRODUCE:-6}; export REPLAY_DRAIN=${REPLAY_DRAIN:-12}; }
dir=$(mktemp -d)
# scenarios c and d keep their locks and done markers in Redis (stopped afterwards if
# this script started it): without one every message of theirs would fail its policy
start_redis
export REPLAY_REDIS=${REPLAY_REDIS:-$REDIS}
# windows down to 1 s: the replay runs at a tenth of the incident's time
start_devbroker --min-invisible-ms 1000
for run in $(seq "$RUNS"); do
  pids=()
  for s in a b c d; do
    mkdir -p "$dir/$s"
    note "incident replay: scenario $s, $produce s at $rate msg/s (run $run/$RUNS)"
    if [[ $QUICK == 1 ]]; then
      lua5.4 bench/replay.lua scenario "$DV" "$DV_CONTROL" "$s" "$produce" "$rate" "$dir/$s" >"$dir/$s.json" &
      pids+=($!)
    else
      lua5.4 bench/replay.lua scenario "$DV" "$DV_CONTROL" "$s" "$produce" "$rate" "$dir/$s" >"$dir/$s.json"
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid" || true; done
  for s in a b c d; do echo "replay $(cat "$dir/$s.json")" >>"$replay_results"; done
done
stop_devbroker
rm -rf "$dir"
}
if part replay; then part_replay; fi

# ---- part 4: exactly-once against plain over the same backlog size ---------------------
part_eo() {
local n=${BENCH_EO_COUNT:-20000} run policy topic
[[ $QUICK == 1 ]] && n=${BENCH_EO_COUNT:-5000}
# its CPU is read from /proc: the bench's own redis-server serves no one else
start_redis
start_devbroker
local plain_line plain_rate load_pid bound_line
for run in $(seq "$RUNS"); do
  for policy in plain exactly_once bound $([[ $QUICK == 1 ]] || echo bound_onekey); do
    topic="eo_${policy}_${run}_$RANDOM"
    printf 'topic %s\n' "$topic" | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$DV_CONTROL; cat >&3; head -n1 <&3" >/dev/null
    lua5.4 bench/lease.lua load "$DV" "$topic" "$n" "$SIZE" >/dev/null
    note "exactly-once: mqlease.run, $policy, $n x $SIZE B (run $run/$RUNS)"
    if [[ $policy == plain ]]; then
      plain_line=$(BENCH_BROKER_PID=$DV_PID lua5.4 bench/bench.lua run "$DV" "${topic}_g" "$topic" "$n")
      echo "eo $plain_line" >>"$eo_results"
    elif [[ $policy == exactly_once ]]; then
      echo "eo $(BENCH_BROKER_PID=$DV_PID lua5.4 bench/bench.lua run "$DV" "${topic}_g" "$topic" "$n" "$REDIS" "$REDIS_PID")" >>"$eo_results"
    else
      # bound: plain again, beside the policy's scripts sent to Redis by another
      # process (bench/eo_load.lua) at 3/4 of this run's plain rate, for as long
      # as the run should take at that rate: an exactly-once whose policy cost
      # nothing in the worker could reach about this rate here
      plain_rate=$(grep -o '"msgs_per_s":[0-9.]*' <<<"$plain_line" | cut -d: -f2)
      plain_rate=${plain_rate%.*}
      # (bound_onekey: the same with the scripts of bench/eo_onekey.lua, a probe
      # of a leaner layout; not under QUICK=1)
      LAYOUT=$([[ $policy == bound_onekey ]] && echo onekey || echo policy) \
        lua5.4 bench/eo_load.lua "$REDIS" "$((plain_rate * 3 / 4))" "$(awk -v n="$n" -v r="$plain_rate" 'BEGIN { print n / (r * 0.75) + 0.5 }')" &
      load_pid=$!
      bound_line=$(BENCH_BROKER_PID=$DV_PID lua5.4 bench/bench.lua run "$DV" "${topic}_g" "$topic" "$n")
      if wait "$load_pid"; then echo "eo ${bound_line/\"policy\":\"plain\"/\"policy\":\"$policy\"}" >>"$eo_results"
      else note "bench/eo_load.lua failed: no bound row for run $run (it ran beside a lighter load)"; fi
    fi
  done
done
stop_devbroker
# what the policy alone costs the worker, and its scripts Redis, part by part
note "exactly-once: the policy's own CPU (bench/eo_policy.lua), the scripts' Redis CPU by part (bench/eo_parts.lua)"
lua5.4 bench/eo_policy.lua "$REDIS" >>"$eo_results"
lua5.4 bench/eo_parts.lua "$REDIS" "$REDIS_PID" "$([[ $QUICK == 1 ]] && echo 500 || echo 1000)" >>"$eo_results"
}
if part eo; then part_eo; fi

# ---- part send: sends in flight ------------------------------------------------------
# One at a time (SEND_ONE, 2000), then SEND_COUNT (20000; QUICK 10000) in flight from SEND_INFLIGHT (128)
# coroutines and as one send_many, then the Java client's sendAsync with as many outstanding,
# on the real RocketMQ, each run on a fresh topic. QUICK: once on the dev broker, no JVM.
part_send() {
local one=${SEND_ONE:-2000} n=${SEND_COUNT:-20000} k=${SEND_INFLIGHT:-128} e label run how topics=()
[[ $QUICK == 1 ]] && n=${SEND_COUNT:-10000}
if [[ $QUICK == 1 ]]; then
  start_devbroker
  e=$DV label="the dev broker"
  for run in $(seq "$RUNS"); do
    topics+=("send_${run}_$RANDOM")
    printf 'topic %s\n' "${topics[-1]}" | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$DV_CONTROL; cat >&3; head -n1 <&3" >/dev/null
  done
else
  ROCKETMQ=1
  bash mk/rocketmq.sh start
  e=$(bash mk/rocketmq.sh env | sed -n 's/^MQLEASE_ENDPOINTS=//p')
  label="RocketMQ $(bash mk/rocketmq.sh env | sed -n 's/^MQLEASE_ROCKETMQ_VERSION=//p') (namesrv + proxy local mode)"
  for run in $(seq "$RUNS"); do topics+=("s$(date +%s)_${run}_$RANDOM"); done
  bash mk/rocketmq.sh topics "${topics[@]}" >/dev/null
fi
for run in $(seq "$RUNS"); do
  note "sends in flight: $one one at a time, $n from $k coroutines, $n by send_many (run $run/$RUNS)"
  echo "send $(lua5.4 bench/bench.lua send "$e" "${topics[run - 1]}" "$one" "$SIZE" one "$k") $label, $SIZE-byte bodies" >>"$send_results"
  for how in coroutines many; do
    echo "send $(lua5.4 bench/bench.lua send "$e" "${topics[run - 1]}" "$n" "$SIZE" "$how" "$k") $label, $SIZE-byte bodies" >>"$send_results"
  done
  if [[ $QUICK != 1 ]]; then
    note "sends in flight: $n by the Java client's sendAsync, $k outstanding (run $run/$RUNS)"
    echo "send $(bash bench/java.sh run sendasync "$e" "${topics[run - 1]}" "$n" "$SIZE" "$k") $label, $SIZE-byte bodies" >>"$send_results"
  fi
done
stop_devbroker
}
if part send; then part_send; fi
if part brokers; then BENCH_RUNS=$RUNS bash bench/brokers.sh >>"$brokers_results"; fi
if ! part throughput && ! part java; then
  lua5.4 bench/table.lua "$results" "$COUNT" "$SIZE" "$HOLD" "$HOLD_S" "$HOLD_BIG" "$lease_results" | tee "$OUT"
  exit 0
fi

# ---- part 1 ----------------------------------------------------------------------------
ROCKETMQ=1
bash mk/rocketmq.sh start
bash bench/java.sh fetch >/dev/null
eval "$(bash mk/rocketmq.sh env)"
E=$MQLEASE_ENDPOINTS
R=b$(date +%s)
# fresh topics for each run: a new group on a topic starts at offset 0 only when it is fresh
topics=()
for run in $(seq "$RUNS"); do
  for t in lp jp lh jh lb lr le jr js; do topics+=("${R}_$t$run"); done
done
bash mk/rocketmq.sh topics "${topics[@]}" >/dev/null

lua() { lua5.4 bench/bench.lua "$@"; }
java() { bash bench/java.sh run "$@"; }

part_throughput() {
# a pre-loaded backlog per client, each consumed by a fresh group
start_redis
for run in $(seq "$RUNS"); do
note "throughput: $RUN_COUNT x $SIZE B each for mqlease.run, the Java PushConsumer and SimpleConsumer (run $run/$RUNS)"
for t in "${R}_lr$run" "${R}_le$run" "${R}_jr$run" "${R}_js$run"; do lua5.4 bench/lease.lua load "$E" "$t" "$RUN_COUNT" "$SIZE" >/dev/null; done
{ echo "luarun $(lua run "$E" "${R}_glr$run" "${R}_lr$run" "$RUN_COUNT")"; } >>"$results"
# the same backlog under the exactly-once policy (the bench's own redis-server): what
# exactly-once costs where the broker, not the client, is the bound
{ echo "luarun $(lua run "$E" "${R}_gle$run" "${R}_le$run" "$RUN_COUNT" "$REDIS" "$REDIS_PID")"; } >>"$results"
{ echo "javarun $(java push "$E" "${R}_gjr$run" "${R}_jr$run" "$RUN_COUNT")"; } >>"$results"
{ echo "javarun $(java consume "$E" "${R}_gjs$run" "${R}_js$run" "$RUN_COUNT" 30 32)"; } >>"$results"
done
}
if part throughput; then part_throughput; fi
if ! part java; then
  lua5.4 bench/table.lua "$results" "$COUNT" "$SIZE" "$HOLD" "$HOLD_S" "$HOLD_BIG" "$lease_results" | tee "$OUT"
  exit 0
fi

# produce, then consume the backlog (a fresh group on a fresh topic starts at offset 0)
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
for run in $(seq "$RUNS"); do
note "produce $COUNT x $SIZE B (run $run/$RUNS)"
{ echo "lua $(lua produce "$E" "${R}_lp$run" "$COUNT" "$SIZE")"; } >>"$results"
{ echo "java $(java produce "$E" "${R}_jp$run" "$COUNT" "$SIZE")"; } >>"$results"
note "consume $COUNT (run $run/$RUNS)"
{ echo "lua $(lua consume "$E" "${R}_glc$run" "${R}_lp$run" "$COUNT" 30 32)"; } >>"$results"
{ echo "java $(java consume "$E" "${R}_gjc$run" "${R}_jp$run" "$COUNT" 30 32)"; } >>"$results"
note "hold $HOLD leases for $HOLD_S s (run $run/$RUNS)"
hold lua "${R}_lh$run" "$HOLD"
hold java "${R}_jh$run" "$HOLD"
note "hold $HOLD_BIG leases (mqlease only, run $run/$RUNS)"
hold lua "${R}_lb$run" "$HOLD_BIG"
done

lua5.4 bench/table.lua "$results" "$COUNT" "$SIZE" "$HOLD" "$HOLD_S" "$HOLD_BIG" "$lease_results" | tee "$OUT"
