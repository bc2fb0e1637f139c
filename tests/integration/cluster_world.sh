# tests/integration/cluster_world.sh: what the cluster tests share (sourced after cp_world.sh
# and tests/lib/pg.sh, once cp_world ran with the test backend and al_pg_start started the
# database):
#   start JOB STATE CONFIG  airlockd-test in the world's host namespace with the world's API key,
#                           on $LISTEN (default 127.0.0.1:0), STATE its state directory (the
#                           world's policies copied in), CONFIG its configuration; waits for the
#                           banner and sets URL_<JOB> (dashes as underscores) to its API URL;
#                           earlier runs' logs go to JOB.history.log
#   in_host CMD...          CMD in the world's host namespace
#   api ARGS... / code ARGS...  curl there with the API key / only the status it got
#   sql QUERY               psql against the test's PostgreSQL, one value per line
#   field NAME              the top-level field NAME of the JSON object on stdin ("" if none)
# shellcheck shell=bash

start() {
  local job=$1 st=$2 conf=$3
  [ -f "$AL_TMP/$job.log" ] && cat "$AL_TMP/$job.log" >>"$AL_TMP/$job.history.log"
  : >"$AL_TMP/$job.log"
  mkdir -p "$st/policies"
  [ "$st" = "$CP_STATE" ] || cp "$CP_STATE/policies/e2e.yaml" "$st/policies/"
  chmod 0711 "$st"
  al_bg "$job" nsenter --net="/run/netns/$CP_HOSTNS" -- env AIRLOCK_API_KEY="$CP_KEY" \
    AIRLOCK_LOG_FORMAT=json "$AIRLOCK_BIN/airlockd-test" --listen "${LISTEN:-127.0.0.1:0}" \
    --state-dir "$st" --config "$conf"
  al_wait_line "$job" '^export E2B_API_URL=' 600 || { tail -40 "$AL_TMP/$job.log" >&2; return 1; }
  printf -v "URL_${job//-/_}" '%s' "$(sed -n 's/^export E2B_API_URL=//p' "$AL_TMP/$job.log" | tail -1)"
}
in_host() { nsenter --net="/run/netns/$CP_HOSTNS" "$@"; }
api() { in_host curl -sS -H "X-API-KEY: $CP_KEY" "$@"; }
code() { api -o /dev/null -w '%{http_code}' "$@"; }
sql() { al__pg_as "$AL_PG_BIN/psql" -X -At "$AL_PG_CONNINFO" -c "$1"; }
field() { python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1]) or "")' "$1"; }
