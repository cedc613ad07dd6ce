#!/bin/sh
# deps.sh ITEM... -- makes sure what the build and the tests need is installed.
# An ITEM is a Debian package name, or "command=package": then the package is
# only needed when the command is missing (node, java and mvn may come from
# elsewhere than Debian, e.g. a toolchain manager). As root the missing
# packages are installed (idempotent); otherwise the exact command to run is
# printed and the script fails, so `make test` never half-works.
set -eu
missing=""
for item in "$@"; do
    case $item in
    *=*)
        cmd=${item%%=*} pkg=${item#*=}
        command -v "$cmd" >/dev/null 2>&1 && continue ;;
    *)
        pkg=$item ;;
    esac
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "mqlease: missing Debian packages:$missing" >&2
    echo "run:  sudo apt-get update && sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "mqlease: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
