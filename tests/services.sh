#!/usr/bin/env bash
# `up`: make sure PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379) answer, starting
# throwaway ones where nothing does. `down`: stop only what `up` started.
set -euo pipefail
state="${FJORD_TEST_SERVICES:-/tmp/fjord-test-services}"

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pg_up() {
  answers 5432 && return 0
  if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -n1 || command -v initdb)")
  id postgres >/dev/null 2>&1 || useradd --system --home "$state" postgres
  mkdir -p "$state" && rm -rf "$state/pg" && chown postgres "$state"
  runuser -u postgres -- "$bin/initdb" -D "$state/pg" -U postgres --auth=trust >/dev/null
  runuser -u postgres -- "$bin/pg_ctl" -D "$state/pg" -l "$state/pg.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p 5432 -k $state" start >/dev/null
  echo "$bin" > "$state/pg.started"
  echo "started a throwaway PostgreSQL on 127.0.0.1:5432"
}

redis_up() {
  answers 6379 && return 0
  command -v redis-server >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }
  mkdir -p "$state"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir "$state" --pidfile "$state/redis.pid" --logfile "$state/redis.log"
  for _ in $(seq 100); do answers 6379 && break; sleep 0.1; done
  touch "$state/redis.started"
  echo "started a throwaway Redis on 127.0.0.1:6379"
}

down() {
  if [ -f "$state/pg.started" ]; then
    runuser -u postgres -- "$(cat "$state/pg.started")/pg_ctl" -D "$state/pg" -m fast stop >/dev/null || true
    rm -f "$state/pg.started"
  fi
  if [ -f "$state/redis.started" ]; then
    kill "$(cat "$state/redis.pid")" 2>/dev/null || true
    rm -f "$state/redis.started"
  fi
}

case "${1:-}" in
  up) pg_up; redis_up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
