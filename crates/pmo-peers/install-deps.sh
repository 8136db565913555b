#!/bin/sh
# Installs what pmo-peers links against: PMDK libpmemobj (with libpmem), LMDB and pkg-config.
# Idempotent: apt-get install does nothing for packages already present. Needs root (or sudo).
set -eu
PKGS="libpmemobj-dev liblmdb-dev pkg-config"
if dpkg-query -W -f='${Status}\n' $PKGS 2>/dev/null | grep -qv 'install ok installed' \
   || [ "$(dpkg-query -W -f='${Status}\n' $PKGS 2>/dev/null | wc -l)" -ne 3 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y $PKGS
fi
pkg-config --exists libpmemobj lmdb
echo "pmo-peers dependencies present: $(pkg-config --modversion libpmemobj) (libpmemobj), $(pkg-config --modversion lmdb) (lmdb)"
