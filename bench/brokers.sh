#!/usr/bin/env bash
# bench/brokers.sh: the "brokers" part of `make bench` (bench/all.sh): 1, 2 and 4 worker
# processes (BENCH_BROKERS_WORKERS) of bench/workers.lua -- mqlease.run with a no-op handler,
# one group -- draining one pre-loaded backlog of BENCH_BROKERS_COUNT (20000) 100-byte
# messages on a topic with 4 queues on EACH of two brokers, on a real RocketMQ cluster:
# mk/rocketmq.sh MQLEASE_CLUSTER=1 MQLEASE_BROKERS=2 (namesrv, broker-a, broker-b, two
# cluster-mode proxies), started here on ports of its own (BENCH_BROKERS_PORT, 18881: gRPC
# PORT and PORT+2, remoting PORT-1 and PORT+1, namesrv PORT+1000, brokers PORT+2000 and
# PORT+2010) and stopped at the end. The workers get both proxies ("a;b"). BENCH_RUNS runs
# (3), each row on a fresh topic and group. Prints one JSON line per worker process:
# {"workers", "run", "backlog", "server_ticks" (the two brokers' and two proxies' CPU over the
# row, in clock ticks), then workers.lua's own line}; bench/table_brokers.lua tables them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${BENCH_RUNS:-3}
WORKERS=${BENCH_BROKERS_WORKERS:-1 2 4}
COUNT=${BENCH_BROKERS_COUNT:-20000}
BASE=${BENCH_BROKERS_PORT:-18881}
RUN=${BENCH_BROKERS_RUN:-/tmp/mqlease-bench-brokers}
export MQLEASE_CLUSTER=1 MQLEASE_BROKERS=2 MQLEASE_RUN=$RUN MQLEASE_STOP_GRACE=5 \
  MQLEASE_GRPC_PORT=$BASE MQLEASE_GRPC_PORT2=$((BASE + 2)) MQLEASE_REMOTING_PORT=$((BASE - 1)) \
  MQLEASE_REMOTING_PORT2=$((BASE + 1)) MQLEASE_NAMESRV_PORT=$((BASE + 1000)) \
  MQLEASE_BROKER_PORT=$((BASE + 2000)) MQLEASE_BROKER_B_PORT=$((BASE + 2010))
E="127.0.0.1:$BASE;127.0.0.1:$((BASE + 2))"
note() { echo "bench: $*" >&2; }
trap 'bash mk/rocketmq.sh stop >&2 || true; rm -rf "$RUN"' EXIT
bash mk/rocketmq.sh start >&2

# CPU ticks of the server JVMs doing the work (not namesrv): both brokers and both proxies
server_ticks() {
  local n t=0 pid
  for n in broker broker-b proxy1 proxy2; do
    pid=$(<"$RUN/$n.pid")
    t=$((t + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$t"
}

R=k$(date +%s)
topics=()
for run in $(seq "$RUNS"); do for w in $WORKERS; do topics+=("${R}_w${w}_r$run"); done; done
bash mk/rocketmq.sh topics "${topics[@]}" >&2
for run in $(seq "$RUNS"); do
  for w in $WORKERS; do
    topic=${R}_w${w}_r$run
    note "brokers: $w processes of mqlease.run over $COUNT messages on two brokers (run $run/$RUNS)"
    lua5.4 bench/brokers_load.lua "$E" "$topic" "$COUNT" 100 >/dev/null
    dir=$(mktemp -d)
    pids=()
    for i in $(seq "$w"); do
      lua5.4 bench/workers.lua "$E" "${topic}_g" "$topic" "$dir/go" 2 >"$dir/$i.json" &
      pids+=($!)
    done
    sleep 2   # each builds its consumer meanwhile
    t0=$(server_ticks)
    touch "$dir/go"
    for i in "${pids[@]}"; do wait "$i" || true; done
    t1=$(server_ticks)
    for i in $(seq "$w"); do
      echo "{\"workers\":$w,\"run\":$run,\"backlog\":$COUNT,\"server_ticks\":$((t1 - t0)),$(sed 's/^{//' "$dir/$i.json")"
    done
    rm -rf "$dir"
  done
done
