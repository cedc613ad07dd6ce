#!/usr/bin/env bash
# java-peer.sh PEER produce|consume ARGS... -- runs one Java peer of the interop specs with the
# JDK's single-file source launcher (nothing is built) on the official Java client, which
# bench/java.sh fetches into the cache once (one shaded jar). Lines on stdout.
#   client52  spec/support/java/Client52Interop.java, for java_client_interop_spec.lua: the client
#             of today, rocketmq-client-java 5.2.0 (MQLEASE_JAVA_CLIENT_VERSION picks another)
#   tx        spec/support/java/TxInterop.java, for transaction_interop_spec.lua: bench/java.sh's
#             client version
#   wire      spec/support/java/WireInterop.java, for wire_spec.lua: bench/java.sh's client and the
#             jars of RocketMQ ${ROCKETMQ_VERSION:-5.2.0} that mk/rocketmq.sh fetched (they hold the
#             remoting client, rocketmq-client; the 5.x client is shaded, so both fit on one classpath)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
peer=${1:?usage: java-peer.sh client52|tx|wire produce|consume ARGS...}
shift
heap=512m extra=
case $peer in
  client52) source=spec/support/java/Client52Interop.java
            export MQLEASE_JAVA_CLIENT_VERSION=${MQLEASE_JAVA_CLIENT_VERSION:-5.2.0} ;;
  tx)       source=spec/support/java/TxInterop.java ;;
  wire)     source=spec/support/java/WireInterop.java heap=1g
            rmq_lib=${MQLEASE_CACHE:-$HOME/.cache/mqlease}/rocketmq-${ROCKETMQ_VERSION:-5.2.0}/lib
            [[ -f $rmq_lib/.complete ]] || bash mk/rocketmq.sh fetch >&2
            extra=":$rmq_lib/*" ;;
  *)        echo "java-peer.sh: no peer '$peer' (client52, tx or wire)" >&2; exit 2 ;;
esac
JLIB=$(bash bench/java.sh lib 2>/dev/null | tail -1)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
java -Xms64m -Xmx"$heap" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Duser.home="$logs" -Drocketmq.client.logRoot="$logs" -Dlogback.configurationFile=/dev/null \
  -Drocketmq.log.level=ERROR -Dmqlease.peer="$peer" \
  -cp "$JLIB/*$extra" "$source" "$@"
