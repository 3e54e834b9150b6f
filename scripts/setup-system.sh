#!/usr/bin/env bash
# Installs and starts what the test network needs on a fresh machine of this kind; idempotent
# and quick when everything is already there. Debian packages by name, npm packages from the
# lock file. Runs as root (as CI does).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v knotd >/dev/null 2>&1 || need_apt+=(knot)
command -v kdig >/dev/null 2>&1 || need_apt+=(knot-dnsutils)
# DNS over HTTPS on the test network (a front end for the DNS proxy; never started as a service)
command -v dnsdist >/dev/null 2>&1 || need_apt+=(dnsdist)
# a caching recursive resolver in front of the test network's DNS (never started as a service)
command -v unbound >/dev/null 2>&1 || need_apt+=(unbound)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
command -v pg_ctlcluster >/dev/null 2>&1 || need_apt+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# redis-cli makes the tests' Redis Cluster (`--cluster create`: devnet/redis_cluster.py)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
# the browser tests' headless browser and its driver (nothing is downloaded at run time)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# PostgreSQL for the reference PLC directory (trust auth on 127.0.0.1:5432 on this machine kind).
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "setup: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi

# Redis for the shared cache tests.
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "setup: starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log --hash-max-listpack-value 1024
fi

# npm packages, exactly as locked, each in its folder; again only when the lock changed.
npm_install() {
  local dir=$1 what=$2
  if [ ! -f "$dir/node_modules/.package-lock.json" ] || ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.atwhois-lock"; then
    echo "setup: installing $what from npm"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$dir/package-lock.json" "$dir/node_modules/.atwhois-lock"
  fi
}
npm_install devnet/plc "the PLC directory"
npm_install devnet/pds "the reference PDS"
npm_install tests/browser "axe-core (the browser tests' accessibility check)"
