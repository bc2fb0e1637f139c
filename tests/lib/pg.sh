#!/usr/bin/env bash
# tests/lib/pg.sh: a private PostgreSQL server for one test (sourced, or run as a wrapper).
#
#   al_pg_start          initdb in a fresh temporary directory and start a server listening
#                        only on a unix socket in that directory (no TCP at all); sets
#                        AL_PG_DIR, AL_PG_CONNINFO (libpq conninfo of database "airlock",
#                        user "airlock", no password) and AL_PG_ADMIN (the same, database
#                        "postgres": for CREATE/DROP DATABASE)
#   al_pg_stop           stops that server (SIGQUIT to its postmaster by PID, then SIGKILL
#                        after 30 s) and removes the directory; safe to call twice
#   al_pg_restart        stops the postmaster (fast) and starts it again on the same data
#   al_pg_kill_server    stops it and leaves it stopped (an outage; al_pg_start_again ends it)
#   al_pg_start_again    starts it again on the same data directory and socket
#   pg.sh CMD [ARGS...]  run directly: starts a server, runs CMD with AIRLOCK_TEST_PG (the
#                        conninfo) and AIRLOCK_TEST_PG_ADMIN in its environment, stops the
#                        server whatever CMD did, exits with CMD's status
#
# The server runs as an unprivileged user: initdb and postgres refuse to run as root. As root
# (CI) that is `nobody` (AL_PG_USER overrides it), through runuser; the directory is made
# theirs, its parent traversable; as another user the server runs as that user. Authentication
# is "trust" on the socket only: the socket lives in a directory of mode 0700 owned by the
# server's user, so only that user and root reach it. Debian 12's PostgreSQL 15 binaries are
# in /usr/lib/postgresql/15/bin (AL_PG_BIN overrides it); deploy/setup installs them.
# shellcheck shell=bash

AL_PG_BIN=${AL_PG_BIN:-/usr/lib/postgresql/15/bin}
AL_PG_DIR=""
AL_PG_CONNINFO=""
AL_PG_ADMIN=""

al__pg_as() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u "${AL_PG_USER:-nobody}" -- "$@"
  else
    "$@"
  fi
}

al__pg_pid() {
  [ -n "$AL_PG_DIR" ] && [ -f "$AL_PG_DIR/data/postmaster.pid" ] && head -1 "$AL_PG_DIR/data/postmaster.pid"
}

# Starts the postmaster on the existing data directory and waits (bounded) until it accepts
# connections.
al__pg_run() {
  al__pg_as "$AL_PG_BIN/pg_ctl" -D "$AL_PG_DIR/data" -l "$AL_PG_DIR/server.log" -w -t 120 \
    -o "-c listen_addresses= -c unix_socket_directories=$AL_PG_DIR/sock -c fsync=off \
-c synchronous_commit=off -c full_page_writes=off -c max_connections=100" start >/dev/null || {
    echo "pg.sh: the PostgreSQL server did not start; its log:" >&2
    cat "$AL_PG_DIR/server.log" >&2
    return 1
  }
}

al_pg_start() {
  if [ ! -x "$AL_PG_BIN/initdb" ]; then
    echo "pg.sh: PostgreSQL 15 is not installed ($AL_PG_BIN/initdb): deploy/setup installs it" >&2
    return 1
  fi
  AL_PG_DIR=$(mktemp -d /tmp/al-pg.XXXXXX) || return 1
  chmod 0711 "$AL_PG_DIR"
  mkdir -p "$AL_PG_DIR/sock"
  if [ "$(id -u)" = 0 ]; then
    chown "${AL_PG_USER:-nobody}:" "$AL_PG_DIR"
    chown "${AL_PG_USER:-nobody}:" "$AL_PG_DIR/sock"
  fi
  chmod 0700 "$AL_PG_DIR/sock"
  if ! al__pg_as "$AL_PG_BIN/initdb" -D "$AL_PG_DIR/data" -U airlock -A trust --no-sync \
    -E UTF8 --locale=C >"$AL_PG_DIR/initdb.log" 2>&1; then
    echo "pg.sh: initdb failed:" >&2
    cat "$AL_PG_DIR/initdb.log" >&2
    return 1
  fi
  # Unix socket only: no TCP listener to collide with anything.
  printf 'local all all trust\n' >"$AL_PG_DIR/data/pg_hba.conf"
  al__pg_run || return 1
  AL_PG_ADMIN="host=$AL_PG_DIR/sock dbname=postgres user=airlock"
  AL_PG_CONNINFO="host=$AL_PG_DIR/sock dbname=airlock user=airlock"
  al__pg_as "$AL_PG_BIN/psql" -q -X -v ON_ERROR_STOP=1 "$AL_PG_ADMIN" \
    -c 'CREATE DATABASE airlock' >/dev/null || return 1
}

# Stops the postmaster by its PID: SIGQUIT (immediate shutdown), SIGKILL after 30 s; waits
# until the process is gone (bounded).
al__pg_halt() {
  local pid n=0
  pid=$(al__pg_pid) || return 0
  [ -n "$pid" ] || return 0
  kill -QUIT "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null; do
    n=$((n + 1))
    [ "$n" -eq 300 ] && kill -KILL "$pid" 2>/dev/null
    [ "$n" -gt 600 ] && { echo "pg.sh: postmaster $pid does not exit" >&2; return 1; }
    sleep 0.1
  done
  rm -f "$AL_PG_DIR/data/postmaster.pid"
}

al_pg_kill_server() { al__pg_halt; }
al_pg_start_again() { al__pg_run; }
al_pg_restart() { al__pg_halt && al__pg_run; }

al_pg_stop() {
  [ -n "$AL_PG_DIR" ] || return 0
  al__pg_halt
  case "$AL_PG_DIR" in /tmp/al-pg.*) rm -rf "$AL_PG_DIR" ;; esac
  AL_PG_DIR=""
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -u
  [ $# -ge 1 ] || { echo "usage: pg.sh CMD [ARGS...]" >&2; exit 2; }
  trap al_pg_stop EXIT
  trap 'exit 130' INT TERM
  al_pg_start || exit 1
  AIRLOCK_TEST_PG="$AL_PG_CONNINFO" AIRLOCK_TEST_PG_ADMIN="$AL_PG_ADMIN" "$@"
  exit $?
fi
