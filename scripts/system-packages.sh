#!/usr/bin/env bash
# Install the Debian packages podcode's tests and code-server need, if missing
# (openssh-client: the SSH tests drive the real ssh, sftp and scp).
set -euo pipefail
needed=()
for pkg in chromium libkrb5-dev openssl openssh-client; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || needed+=("$pkg")
done
[ ${#needed[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "podcode: please install the Debian packages: ${needed[*]} (needs root)" >&2
  exit 1
fi
echo "podcode: installing Debian packages: ${needed[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${needed[@]}" >/dev/null
