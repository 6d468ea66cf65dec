#!/usr/bin/env bash
# Installs what Rampart's tests and `rampart up` need: node packages, and from Debian's packages
# haproxy (with Lua and PCRE2), pebble and pebble-challtestsrv (the ACME tests), pdns-server with
# its SQLite backend and sqlite3 (DNS failover), wrk,
# lua5.3 (unit tests of the WAF engine), lua-zlib (compressed request bodies at level high), chromium (the bot-challenge test), openssl (test
# certificates), fakeroot, lintian and systemd-analyze (the Debian package), nginx with ModSecurity v3 and the OWASP CRS (bench:waf's comparison) and
# valgrind (bench:waf's instruction counts) when they are missing. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v pebble >/dev/null 2>&1 || [ -x /usr/bin/pebble ] || need+=(pebble)
command -v pdns_server >/dev/null 2>&1 || [ -x /usr/sbin/pdns_server ] || need+=(pdns-server pdns-backend-bind)
# DNS failover's end-to-end test runs PowerDNS with its SQLite backend (records edited over its HTTP API).
[ -e /usr/share/doc/pdns-backend-sqlite3 ] || need+=(pdns-backend-sqlite3)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v lua5.3 >/dev/null 2>&1 || need+=(lua5.3)
# lua-zlib: level high inflates gzip and deflate request bodies before the detectors read them
# (HAProxy's Lua loads it with require, as the engine's unit tests do).
[ -e /usr/share/doc/lua-zlib ] || need+=(lua-zlib)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# The Debian package (npm run package, npm run package:lint) and its test: fakeroot, lintian,
# systemd-analyze (verifies the units; systemd need not run).
command -v fakeroot >/dev/null 2>&1 || need+=(fakeroot)
command -v lintian >/dev/null 2>&1 || need+=(lintian)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
[ -e /usr/lib/nginx/modules/ngx_http_modsecurity_module.so ] || need+=(libnginx-mod-http-modsecurity)
[ -d /usr/share/modsecurity-crs/rules ] || need+=(modsecurity-crs)
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)

if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${need[*]} from Debian's packages"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The packages start their own services; Rampart's agent runs its own HAProxy, tests run their
  # own and bench:waf its own nginx.
  for svc in haproxy pdns nginx; do
    if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; fi
    $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
