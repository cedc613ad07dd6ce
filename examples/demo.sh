#!/usr/bin/env bash
# make demo: start a real RocketMQ on loopback (spec/support/rocketmq.sh), run
# examples/demo.lua against it, and stop what was started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
trap 'bash spec/support/rocketmq.sh stop >/dev/null || true' EXIT
bash spec/support/rocketmq.sh start
eval "$(bash spec/support/rocketmq.sh env)"
topic="demo_$(date +%s)"
bash spec/support/rocketmq.sh topics "$topic" >/dev/null
echo "demo: topic $topic on $MQLEASE_ENDPOINTS (invisible duration 10 s)"
lua5.4 examples/demo.lua "$MQLEASE_ENDPOINTS" "$topic"
