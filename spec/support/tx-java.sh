#!/usr/bin/env bash
# tx-java.sh produce|consume ARGS... -- runs spec/support/java/TxInterop.java (the Java peer of
# spec/integration/transaction_interop_spec.lua) with the official 5.x client bench/java.sh
# fetches (rocketmq-client-java, shaded). Lines on stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
JLIB=$(bash bench/java.sh lib 2>/dev/null | tail -1)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
java -Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Duser.home="$logs" -Drocketmq.client.logRoot="$logs" -Dlogback.configurationFile=/dev/null \
  -Drocketmq.log.level=ERROR -Dmqlease.peer=tx \
  -cp "$JLIB/*" spec/support/java/TxInterop.java "$@"
