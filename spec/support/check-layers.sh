#!/usr/bin/env bash
# check-layers.sh -- the boundaries of src/ that include paths alone cannot enforce.
#
# The Makefile compiles each folder seeing only the headers of the folders below it, so a
# file in src/core cannot include a lease, RocketMQ, Redis or Lua header. grpc's headers sit
# in /usr/include for everyone, so what the pure folders may take from grpc is checked here:
#   src/core   nothing of grpc
#   src/lease  grpc's byte buffers and slices only (the codec turns them into protobuf-c
#              structs); no channel, call, completion queue or server
#   the core's public headers (src/rocketmq/mql_client.h and the types it shares with the
#   stages, mql_client_types.h) pull in no grpc header
# and nothing outside src/lua includes lua.h. Inside src/rocketmq (the map is at the top of
# mql_base.h), ownership is checked too:
#   no include cycle: a file X.c and its header X.h are one module, which depends on module
#     Y when either includes Y.h; every function is declared in its own file's header and
#     -Werror refuses an undeclared call, so no file calls into one that calls back into it
#   each function's prefix names its file: mql_renew_timers is mql_renew.c's (and mql_renew.h
#     declares it)
#   only mql_client.c, the public API above the stages, takes c->mu
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bad=0
fail() { echo "check-layers: $*" >&2; bad=1; }

while IFS= read -r hit; do fail "src/core may not use grpc: $hit"; done \
  < <(grep -Hn '#include *<grpc' src/core/* 2>/dev/null)
while IFS= read -r hit; do fail "src/lease may use grpc byte buffers and slices only: $hit"; done \
  < <(grep -Hn '#include *<grpc' src/lease/* | grep -v 'grpc/byte_buffer\(_reader\)\?\.h>\|grpc/slice\.h>')
while IFS= read -r hit; do fail "only src/lua may include lua.h: $hit"; done \
  < <(grep -Hn '#include *<\(lua\|lauxlib\|lualib\)\.h>' src/core/* src/lease/* src/rocketmq/* src/redis/* src/devbroker/*)
while IFS= read -r hit; do fail "the public headers may not pull in grpc: $hit"; done \
  < <(grep -Hn '#include *<grpc\|#include *"mql_call.h"\|#include *"mql_base.h"' \
        src/rocketmq/mql_client.h src/rocketmq/mql_client_types.h)

# src/rocketmq: the module graph (X -> Y: X.c or X.h includes Y.h) has no cycle.
declare -A deps=() state=()
for f in src/rocketmq/*.[ch]; do
  m=$(basename "${f%.[ch]}")
  deps[$m]+=""
  for h in $(sed -n 's/^#include *"\(mql_[a-z0-9_]*\)\.h".*/\1/p' "$f"); do
    [[ -f src/rocketmq/$h.h && $h != "$m" ]] && deps[$m]+=" $h"
  done
done
cycle=""
visit() {   # depth first; state 1: on the current path, 2: done
  local m=$1 d
  state[$m]=1
  for d in ${deps[$m]}; do
    case ${state[$d]:-0} in
      1) cycle="$m -> $d"; return 1 ;;
      0) visit "$d" || { cycle="$m -> $cycle"; return 1; } ;;
    esac
  done
  state[$m]=2
}
for m in "${!deps[@]}"; do
  [[ ${state[$m]:-0} == 0 ]] && ! visit "$m" && { fail "include cycle in src/rocketmq: $cycle"; break; }
done

# src/rocketmq: each function defined in X.c or declared in X.h is named X_*.
for f in src/rocketmq/*.[ch]; do
  m=$(basename "${f%.[ch]}")
  while IFS= read -r hit; do
    name=$(sed -E 's/^[^(]*[ *](mql_[a-z0-9_]+)\(.*/\1/' <<<"${hit#*:}")
    [[ $name == "${m}"_* ]] || fail "$f:${hit%%:*}: $name: a function's prefix names its file ($m)"
  done < <(grep -nE '^[a-zA-Z_][^(]*[ *]mql_[a-z0-9_]+\(' "$f" | grep -vE '^[0-9]+:(static|typedef|#)')
done

while IFS= read -r hit; do fail "only mql_client.c takes c->mu: $hit"; done \
  < <(grep -Hn 'pthread_mutex_lock(&c->mu)' src/rocketmq/*.c | grep -v '^src/rocketmq/mql_client\.c:')

[[ $bad == 0 ]] && echo "check-layers: src/ keeps its boundaries"
exit $bad
