#!/usr/bin/env bash
# check-layers.sh -- the boundaries of src/ that include paths alone cannot enforce.
#
# The Makefile compiles each folder seeing only the headers of the folders below it, so a
# file in src/core cannot include a lease, RocketMQ, Redis or Lua header. grpc's headers sit
# in /usr/include for everyone, so what the pure folders may take from grpc is checked here:
#   src/core   nothing of grpc
#   src/lease  grpc's byte buffers and slices only (the codec turns them into protobuf-c
#              structs); no channel, call, completion queue or server
#   the core's public header (src/rocketmq/mql_client.h) pulls in no grpc header
# and nothing outside src/lua includes lua.h.
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
while IFS= read -r hit; do fail "the public header may not pull in grpc: $hit"; done \
  < <(grep -Hn '#include *<grpc\|#include *"mql_call.h"' src/rocketmq/mql_client.h)
[[ $bad == 0 ]] && echo "check-layers: src/ keeps its boundaries"
exit $bad
