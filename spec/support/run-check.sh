#!/usr/bin/env bash
# run-check.sh C_TEST...   -- the server-free tier (`make check`): runs each C test program,
#                             then the busted specs under spec/unit on the sanitizer build
# run-check.sh --luajit    -- the same busted specs on LuaJIT 2.1 (`make check-luajit`)
# Prints one closing line for all. Needs no broker and no Redis.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allow_user_segv_handler=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
LPATH='lua/?.lua;lua/?/init.lua;spec/?.lua'
log=$(mktemp)
status=0
if [[ ${1:-} == --luajit ]]; then
  echo "check: LuaJIT 2.1 pass"
  luajit /usr/bin/busted --ignore-lua --lpath="$LPATH" --cpath='build/luajit/?.so' \
    -o spec/support/summary.lua spec/unit 2>&1 | tee -a "$log" || status=1
else
  for t in "$@"; do
    out=$("$t" 2>&1)
    rc=$?
    printf '%s\n' "$out" | tee -a "$log"
    [[ $rc == 0 ]] && continue
    status=1
    # a program that died (a sanitizer's report, a crash) printed no count of
    # its own: count it as a failure, or the closing line would say "0 failed"
    grep -Eq '[0-9]+ passed, [0-9]+ failed' <<<"$out" ||
      echo "$(basename "$t"): 0 passed, 1 failed (exited with status $rc)" | tee -a "$log"
  done
  ASAN_LIB=$(gcc -print-file-name=libasan.so)
  LD_PRELOAD="$ASAN_LIB" lua5.4 /usr/bin/busted --ignore-lua --lpath="$LPATH" \
    --cpath='build/san/?.so' -o spec/support/summary.lua spec/unit 2>&1 | tee -a "$log" || status=1
fi
awk '/[0-9]+ passed, [0-9]+ failed/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "check: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
exit $status
