#!/usr/bin/env bash
# wire-java.sh produce|consume ARGS... -- runs spec/support/java/WireInterop.java (the Java
# peers of spec/integration/wire_spec.lua) with the RocketMQ 5.2.0 jars rocketmq.sh fetched (they hold
# the remoting client, rocketmq-client) and the official 5.x client bench/java.sh fetches
# (rocketmq-client-java, shaded, so both fit on one classpath). JSON lines on stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
CACHE=${MQLEASE_CACHE:-$HOME/.cache/mqlease}
RMQ_LIB=$CACHE/rocketmq-${ROCKETMQ_VERSION:-5.2.0}/lib
[[ -f $RMQ_LIB/.complete ]] || bash mk/rocketmq.sh fetch >&2
JLIB=$(bash bench/java.sh lib 2>/dev/null | tail -1)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
exec java -Xms64m -Xmx1g -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Duser.home="$logs" -Drocketmq.client.logRoot="$logs" -Dlogback.configurationFile=/dev/null \
  -Drocketmq.log.level=ERROR -Dmqlease.peer=wire \
  -cp "$JLIB/*:$RMQ_LIB/*" spec/support/java/WireInterop.java "$@"
