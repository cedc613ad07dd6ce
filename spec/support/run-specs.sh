#!/usr/bin/env bash
# run-specs.sh [SPEC...] -- what `make test` runs after the build.
#
# Starts a real RocketMQ (spec/support/rocketmq.sh) and redis-server
# (spec/support/redis.sh) on loopback, installs the Node.js interop peer, runs
# the busted specs against the sanitizer build (ASan + UBSan, preloaded into a
# stock lua5.4), and always stops what it started. Fails loudly if a server
# cannot start: no spec silently skips the real broker.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
SUPPORT=spec/support

cleanup() {
  local rc=$?
  bash $SUPPORT/redis.sh stop || true
  bash $SUPPORT/rocketmq.sh stop || true
  exit $rc
}
trap cleanup EXIT INT TERM

t0=$(date +%s)
bash $SUPPORT/rocketmq.sh start
bash $SUPPORT/redis.sh start
bash $SUPPORT/node.sh install
eval "$(bash $SUPPORT/rocketmq.sh env)"
export MQLEASE_ENDPOINTS MQLEASE_REDIS_PORT="${MQLEASE_REDIS_PORT:-16379}"
# the store is thrown away after the specs: no need to wait long for a clean stop
export MQLEASE_STOP_GRACE="${MQLEASE_STOP_GRACE:-5}"
# A fresh suffix per run: topics and groups of earlier runs never leak into this one.
export MQLEASE_RUN_ID="${MQLEASE_RUN_ID:-r$(date +%s)$$}"
echo "specs: servers ready in $(( $(date +%s) - t0 )) s (run id $MQLEASE_RUN_ID)"

ASAN_LIB=$(gcc -print-file-name=libasan.so)
# Leak checking stays off: the stock lua5.4 and grpc keep process-lifetime
# allocations that LeakSanitizer reports at exit; our own frees are exercised
# by the specs that open and close clients in a loop.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allow_user_segv_handler=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

LPATH='lua/?.lua;lua/?/init.lua;spec/?.lua'
log=$(mktemp)
status=0
specs=("$@")
[[ $# -eq 0 ]] && specs=(spec/integration spec/regress)
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

# One closing line for everything that ran.
awk '/^busted: [0-9]+ passed/ { p += $2; f += $4; s += $6 }
     END { printf "\nall specs: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
echo "specs: $(( $(date +%s) - t0 )) s from the servers' start to the last spec"
grep '^FAILED: ' "$log" || true
rm -f "$log"
exit $status
