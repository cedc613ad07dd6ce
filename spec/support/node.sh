#!/usr/bin/env bash
# Node.js interop peer for the specs: the official RocketMQ 5 Node.js client
# (rocketmq-client-nodejs, pinned in spec/support/node/package.json) sends and receives through
# the same gRPC proxy as the Lua module, so the specs can check both directions.
#
#   node.sh install                                   npm install into spec/support/node (once)
#   node.sh produce ENDPOINT TOPIC COUNT [TAG]        = node spec/support/node/produce.js ...
#   node.sh consume ENDPOINT GROUP TOPIC EXPECT TIMEOUT_S
#                                                     = node spec/support/node/consume.js ...
# produce/consume install first if needed; each prints ONE JSON line on stdout (see the .js files).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NODE_DIR=$SCRIPT_DIR/node
CLIENT_VERSION=1.0.8   # must match package.json
APT_LINE='apt-get install -y nodejs npm'

die() { echo "node.sh: error: $*" >&2; exit 1; }

need_node() {
  command -v node >/dev/null 2>&1 || die "node not found; install it with:
  $APT_LINE"
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  # rocketmq-client-nodejs declares node >= 16.19; its README recommends 18+.
  ((major >= 18)) || die "node $(node -v) is too old (need 18+)"
}

installed() {
  [[ -f $NODE_DIR/node_modules/rocketmq-client-nodejs/package.json ]] &&
    [[ $(node -p "require('$NODE_DIR/node_modules/rocketmq-client-nodejs/package.json').version") == "$CLIENT_VERSION" ]]
}

cmd_install() {
  need_node
  installed && return 0
  command -v npm >/dev/null 2>&1 || die "npm not found; install it with:
  $APT_LINE"
  echo "node.sh: installing rocketmq-client-nodejs@$CLIENT_VERSION into $NODE_DIR/node_modules" >&2
  # --ignore-scripts: the client needs no install scripts (its only transitive one,
  # protobufjs' postinstall, is a version check); stdout goes to stderr so `install` never
  # pollutes a caller's stdout.
  (cd "$NODE_DIR" && npm install --no-audit --no-fund --ignore-scripts 1>&2) \
    || die "npm install failed in $NODE_DIR (is the npm registry reachable?)"
  installed || die "npm install finished but rocketmq-client-nodejs@$CLIENT_VERSION is not in $NODE_DIR/node_modules"
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
case $cmd in
  install) cmd_install ;;
  produce) cmd_install; exec node "$NODE_DIR/produce.js" "$@" ;;
  consume) cmd_install; exec node "$NODE_DIR/consume.js" "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
