#!/usr/bin/env bash
# run-specs.sh [SPEC...] -- what `make test` runs after the build.
# run-specs.sh --second [SPEC...] -- only the second broker version's pass (below).
#
# Starts a real RocketMQ (mk/rocketmq.sh) and redis-server
# (spec/support/redis.sh) on loopback, installs the Node.js interop peer, runs
# the busted specs against the sanitizer build (ASan + UBSan, preloaded into a
# stock lua5.4), and always stops what it started. Fails loudly if a server
# cannot start: no spec silently skips the real broker.
#
# The full run also proves the broker-facing core on a second RocketMQ
# version (MQLEASE_SECOND_ROCKETMQ, default 5.5.0, the newest our registry serves
# whole; 5.2.0 - 5.4.0 work too): that version runs in its own run dir on its own
# ports, SECOND_SPECS run against it with their own run id *beside* the first
# pass (in the background, their output held and printed after the first
# pass), then BESIDE_SPECS (first version's spec files that mostly wait) in the
# same background lane; the counts of all fold into the closing line. The specs
# mostly wait on lease and redelivery clocks, so the two lanes share two cores
# without either waiting on the other. MQLEASE_SECOND_SERIAL=1 runs the lane
# after the first pass instead. A broker that cannot start fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
SUPPORT=spec/support
RMQ_SH=mk/rocketmq.sh   # the real RocketMQ (the demo and the bench start it too)

SECOND_VERSION=${MQLEASE_SECOND_ROCKETMQ:-5.5.0}
# The broker-facing core. Not the retry-policy timing (73 s; the Settings it
# reads are checked by fifo_spec on both versions), nor the dev broker's half
# of the conformance spec (no broker in it): the pass must keep the suite
# under 40 minutes.
# priority_recall_spec proves on it what 5.3.2+ and 5.4+ added (30 s on 5.5.0), and
# java_client_interop_spec the Java client of today with priority messages (70 s),
# lite_topic_spec lite topics (5.5+) on a cluster-mode RocketMQ of its own (36 s of specs, its
# four JVMs' start and stop 3 minutes more on a loaded box).
SECOND_SPECS=(spec/integration/conformance_spec.lua spec/integration/roundtrip_spec.lua
  spec/integration/nack_spec.lua spec/integration/lease_spec.lua spec/integration/wire_spec.lua
  spec/integration/fifo_spec.lua spec/integration/priority_recall_spec.lua
  spec/integration/java_client_interop_spec.lua spec/integration/transaction_spec.lua
  spec/integration/lite_topic_spec.lua)
SECOND_FILTER_OUT='mqlease%-devbroker'
# Spec files of the first version that spend their time waiting on the broker's
# clocks (retry delays, redelivery, FIFO handlers that sleep, dev broker leases)
# more than on CPU: a full run gives them to the background lane too, after the
# second version's pass, on the first version's broker, so they wait beside the
# rest (the two lanes come out at about 16 and 19 minutes).
BESIDE_SPECS=(spec/integration/retry_policy_spec.lua spec/integration/fifo_spec.lua
  spec/integration/nack_spec.lua spec/integration/conformance_spec.lua
  spec/integration/devbroker_spec.lua spec/integration/run_spec.lua spec/integration/message_life_spec.lua
  spec/integration/renewal_attempts_spec.lua spec/integration/transaction_spec.lua
  spec/integration/transaction_cpt_spec.lua spec/integration/devbroker_transaction_spec.lua
  spec/regress/ack-after-change-in-a-batch-apache-9583_spec.lua
  spec/regress/failed-release-lets-the-lease-expire_spec.lua
  spec/regress/devbroker-resumed-receive-is-answered-once_spec.lua)
# Spec files that boot JVMs of their own (a RocketMQ for ACL, for a proxy kill,
# four for cluster mode, five for two brokers) or run the Java clients: they come last in the first
# pass, once the background lane is done, since a proxy that boots and warms up
# on two cores shared with the other lane can miss its specs' deadlines (a
# cluster failover did, once).
LAST_SPECS=(spec/integration/wire_spec.lua spec/integration/java_client_interop_spec.lua
  spec/integration/transaction_interop_spec.lua spec/integration/acl_spec.lua
  spec/integration/chaos_spec.lua spec/integration/cluster_spec.lua spec/integration/brokers_spec.lua)
# The second broker's own run dir and ports, so it never meets the first one
# (nor a shared one this run reused and must not stop).
second_env() {
  echo ROCKETMQ_VERSION="$SECOND_VERSION" \
    MQLEASE_RUN="${MQLEASE_RUN:-/tmp/mqlease-rocketmq}-$SECOND_VERSION" \
    MQLEASE_NAMESRV_PORT="${MQLEASE_SECOND_NAMESRV_PORT:-19976}" \
    MQLEASE_BROKER_PORT="${MQLEASE_SECOND_BROKER_PORT:-21011}" \
    MQLEASE_GRPC_PORT="${MQLEASE_SECOND_GRPC_PORT:-18181}" \
    MQLEASE_REMOTING_PORT="${MQLEASE_SECOND_REMOTING_PORT:-18180}"
}

second_started=0
second_pid=
cleanup() {
  local rc=$?
  [[ -z $second_pid ]] || kill -- -"$second_pid" 2>/dev/null || kill "$second_pid" 2>/dev/null || true
  bash $SUPPORT/redis.sh stop || true
  bash $RMQ_SH stop || true
  # only if this run started it: another run's second broker shares its run dir
  ((second_started == 0)) || env $(second_env) bash $RMQ_SH stop >/dev/null 2>&1 || true
  rm -f "${log:-}" "${second_log:-}"
  exit $rc
}
trap cleanup EXIT INT TERM

second_only=0
if [[ ${1:-} == --second ]]; then second_only=1; shift; fi
# the second version runs in a full run or with --second
second_runs=0
[[ $# -eq 0 || $second_only == 1 ]] && second_runs=1
[[ $second_only == 1 && $# -gt 0 ]] && SECOND_SPECS=("$@")
beside=1
[[ ${MQLEASE_SECOND_SERIAL:-0} == 1 || $second_only == 1 ]] && beside=0

t0=$(date +%s)
((second_only)) || bash $RMQ_SH start
bash $SUPPORT/redis.sh start
bash $SUPPORT/node.sh install
((second_only)) || eval "$(bash $RMQ_SH env)"
export MQLEASE_ENDPOINTS MQLEASE_REDIS_PORT="${MQLEASE_REDIS_PORT:-16379}"
# the store is thrown away after the specs: no need to wait long for a clean stop
export MQLEASE_STOP_GRACE="${MQLEASE_STOP_GRACE:-5}"
# A fresh suffix per run: topics and groups of earlier runs never leak into this one.
export MQLEASE_RUN_ID="${MQLEASE_RUN_ID:-r$(date +%s)$$}"

ASAN_LIB=$(gcc -print-file-name=libasan.so)
# Leak checking stays off: the stock lua5.4 and grpc keep process-lifetime
# allocations that LeakSanitizer reports at exit; our own frees are exercised
# by the specs that open and close clients in a loop.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allow_user_segv_handler=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

LPATH='lua/?.lua;lua/?/init.lua;spec/?.lua'
log=$(mktemp)
second_log=$(mktemp)
status=0

# second_pass: start the second version, run SECOND_SPECS on it, stop it; all
# output to stdout. Exit status 1 if a spec failed or the broker did not start.
second_pass() {
  local t1 rc=0
  t1=$(date +%s)
  echo "specs: RocketMQ $SECOND_VERSION pass"
  if ! env $(second_env) bash $RMQ_SH start; then
    echo "specs: RocketMQ $SECOND_VERSION did not start"
    echo "busted: 0 passed, 1 failed, 0 skipped"
    echo "FAILED: RocketMQ $SECOND_VERSION did not start"
    return 1
  fi
  (
    eval "$(env $(second_env) bash $RMQ_SH env)"
    export $(second_env)
    export MQLEASE_ENDPOINTS
    # its own run id: topics and groups of its own, on a broker of its own
    export MQLEASE_RUN_ID="${MQLEASE_RUN_ID}v${SECOND_VERSION//./}"
    LD_PRELOAD="$ASAN_LIB" lua5.4 /usr/bin/busted --ignore-lua --lpath="$LPATH" --cpath='build/san/?.so' \
      --filter-out="$SECOND_FILTER_OUT" -o spec/support/summary.lua "${SECOND_SPECS[@]}"
  ) 2>&1 || rc=1
  env $(second_env) bash $RMQ_SH stop || true
  echo "specs: RocketMQ $SECOND_VERSION pass took $(( $(date +%s) - t1 )) s"
  return $rc
}

# beside_pass: BESIDE_SPECS on the first version's broker, with a run id of their own.
beside_pass() {
  echo "specs: RocketMQ ${ROCKETMQ_VERSION:-5.2.0} specs beside the first pass (${BESIDE_SPECS[*]})"
  MQLEASE_RUN_ID="${MQLEASE_RUN_ID}b" \
  LD_PRELOAD="$ASAN_LIB" lua5.4 /usr/bin/busted --ignore-lua --lpath="$LPATH" --cpath='build/san/?.so' \
    -o spec/support/summary.lua "${BESIDE_SPECS[@]}" 2>&1
}

# background_lane: the second version's pass, then the beside specs; status 1 if
# either failed.
background_lane() {
  local rc=0
  second_pass || rc=1
  beside_pass || rc=1
  return $rc
}

if ((second_runs && beside)); then
  second_started=1
  # its own process group, so the cleanup can stop every process of it
  set -m
  background_lane >"$second_log" 2>&1 &
  second_pid=$!
  set +m
  echo "specs: background lane started: the RocketMQ $SECOND_VERSION pass, then the specs beside (output after the first pass)"
fi
echo "specs: servers ready in $(( $(date +%s) - t0 )) s (run id $MQLEASE_RUN_ID)"

specs=("$@")
if [[ $# -eq 0 ]]; then
  # every spec file but the ones beside_pass runs, LAST_SPECS at the end
  mapfile -t specs < <(find spec/integration spec/regress -name '*_spec.lua' | sort |
    grep -vxF -f <(printf '%s\n' "${BESIDE_SPECS[@]}" "${LAST_SPECS[@]}"))
  specs+=("${LAST_SPECS[@]}")
fi
if ((second_only == 0)); then
LD_PRELOAD="$ASAN_LIB" lua5.4 /usr/bin/busted --ignore-lua --lpath="$LPATH" --cpath='build/san/?.so' \
  -o spec/support/summary.lua "${specs[@]}" 2>&1 | tee "$log" || status=1

# The full run also loads the LuaJIT 2.1 build (OpenResty's VM) for a few specs.
if [[ $# -eq 0 ]]; then
  echo "specs: LuaJIT 2.1 pass"
  # its own run id: its topics and groups are not the ones the first pass left acked
  MQLEASE_RUN_ID="${MQLEASE_RUN_ID}j" \
  luajit /usr/bin/busted --ignore-lua --lpath="$LPATH" --cpath='build/luajit/?.so' -o spec/support/summary.lua \
    spec/integration/errors_spec.lua spec/integration/redis_spec.lua spec/integration/cqueues_spec.lua 2>&1 | tee -a "$log" || status=1
fi
fi

if ((second_runs)); then
  if ((beside)); then
    echo "specs: waiting for the background lane (RocketMQ $SECOND_VERSION pass, specs beside)"
    wait "$second_pid" || status=1
    second_pid=
    second_started=0
    cat "$second_log" | tee -a "$log"
  else
    if ((second_only == 0 && $# == 0)); then
      # serial: the beside specs run on the first version, then it stops
      beside_pass 2>&1 | tee -a "$log" || status=1
      bash $RMQ_SH stop   # only what this run started: a reused broker stays
    fi
    second_started=1
    second_pass 2>&1 | tee -a "$log" || status=1
    second_started=0
  fi
fi

# One closing line for everything that ran.
awk '/^busted: [0-9]+ passed/ { p += $2; f += $4; s += $6 }
     END { printf "\nall specs: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
echo "specs: $(( $(date +%s) - t0 )) s from the servers' start to the last spec"
grep '^FAILED: ' "$log" || true
exit $status
