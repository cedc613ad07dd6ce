#!/usr/bin/env bash
# java-client.sh produce|consume ARGS... -- runs spec/support/java/Client52Interop.java (the
# Java peer of spec/integration/java_client_interop_spec.lua) on the official Java client of
# today, rocketmq-client-java 5.2.0 (MQLEASE_JAVA_CLIENT_VERSION picks another), which
# bench/java.sh fetches into the cache once (one shaded jar). JSON lines on stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export MQLEASE_JAVA_CLIENT_VERSION=${MQLEASE_JAVA_CLIENT_VERSION:-5.2.0}
JLIB=$(bash bench/java.sh lib 2>/dev/null | tail -1)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
java -Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Duser.home="$logs" -Drocketmq.client.logRoot="$logs" -Dlogback.configurationFile=/dev/null \
  -Drocketmq.log.level=ERROR -Dmqlease.peer=client52 \
  -cp "$JLIB/*" spec/support/java/Client52Interop.java "$@"
