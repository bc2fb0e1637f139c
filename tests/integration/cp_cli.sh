#!/usr/bin/env bash
# tests/integration/cp_cli.sh: the `airlock` commands of the control plane against a running
# airlockd (test backend, loopback-only world): `apikey create|ls|revoke` (a revoked key
# stops working at once, keys are stored as digests only, roles: admin by default, an auditor
# key refused a creation), `sandbox create|ls|info|exec|logs|pause|resume|kill`, the refusals
# of `sandbox snapshot|rollback|fork` and `snapshot ls|rm` by this backend (a jail does them:
# snap_api.sh), exit statuses, and the messages for a wrong state directory.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
[ -x "$AIRLOCK_BIN/airlock-agent-dev" ] || { echo "cp_cli: airlock-agent-dev is not built: SKIP"; exit 0; }
cp_world cp_cli test off
cp_start || exit 1

al_note "API keys"
al_ok "create a key restricted to two policies" cp_cli apikey create ci --policies default,e2e
KEY=$(grep -E '^e2b_[0-9a-f]{40}$' <<<"$AL_OUT")
al_check "the key is printed, in the SDK's shape" test -n "$KEY"
al_match "ls shows it, never the key" "ci +.*valid +default,e2e" cp_cli apikey ls
al_fail "... nor anywhere in the database" grep -qF "$KEY" "$CP_STATE/airlockd.db"
api_with() { nsenter --net="/run/netns/$CP_HOSTNS" curl -s -o /dev/null -w '%{http_code}' -H "X-API-KEY: $1" "$CP_URL/v2/sandboxes"; }
al_eq "the key works" "$(api_with "$KEY")" 200
al_fail "a bad policy list is refused (usage error)" cp_cli apikey create x --policies 'a b'
al_ok "revoke it" cp_cli apikey revoke ci
al_eq "refused at once" "$(api_with "$KEY")" 401
al_fail "revoking twice says so" cp_cli apikey revoke ci
al_match "ls --json shows it revoked" '"status": "revoked"' cp_cli apikey ls --json
al_match "a key is an admin key unless --role says otherwise" "ci +admin +" cp_cli apikey ls
al_ok "create an auditor key" cp_cli apikey create watcher --role auditor
AUDITOR=$(grep -E '^e2b_[0-9a-f]{40}$' <<<"$AL_OUT")
al_match "ls shows its role" "watcher +auditor +.*valid" cp_cli apikey ls
al_match "ls --json too" '"role": "auditor"' cp_cli apikey ls --json
al_eq "the auditor key lists sandboxes" "$(api_with "$AUDITOR")" 200
api_create() { nsenter --net="/run/netns/$CP_HOSTNS" curl -s -w ' %{http_code}' -X POST -H "X-API-KEY: $1" -H 'Content-Type: application/json' -d '{"templateID":"base"}' "$CP_URL/v2/sandboxes"; }
al_match "... and may not create one: 403 naming its role" \
  'has the role auditor; POST /v2/sandboxes .*needs the role admin or operator.* 403$' api_create "$AUDITOR"
al_eq "nothing was created" "$(cp_cli sandbox ls --json)" "[]"
al_ok "create an operator key" cp_cli apikey create runner --role operator
al_match "ls shows it" "runner +operator +" cp_cli apikey ls
usage_error() { "$@" 2>&1; [ $? = 2 ]; }
al_match "an unknown role is a usage error that names the roles" "admin, operator or auditor" \
  usage_error cp_cli apikey create x --role root

al_note "sandboxes"
al_ok "create with metadata and environment" cp_cli sandbox create base --metadata team=cli --env GREETING=hello --timeout 300
SB=$AL_OUT
al_match "ls" "$SB +base +running" cp_cli sandbox ls
al_match "ls filtered by metadata" "$SB" cp_cli sandbox ls --metadata team=cli
al_eq "ls filtered by other metadata" "$(cp_cli sandbox ls --json --metadata team=other)" "[]"
al_match "info" '"templateID": "base"' cp_cli sandbox info "$SB"
al_match "exec: output and environment" '^hello$' cp_cli sandbox exec "$SB" -- 'echo $GREETING'
cp_cli sandbox exec "$SB" -- 'exit 7'
al_eq "exec: the command's exit status is ours" "$?" 7
err=$(cp_cli sandbox exec "$SB" --timeout 1 -- 'sleep 30' 2>&1)
al_eq "exec: past --timeout the command is killed, exit 124" "$?" 124
al_match "exec: --timeout says so" 'ran past --timeout 1 s and was killed' echo "$err"
al_match "logs: the agent's lines" "process [0-9]+ started" cp_cli sandbox logs "$SB"
al_match "logs: what its init set, on one line" \
  "init: [0-9]+ environment variable\(s\) set, access token set \([0-9]+ bytes\)" \
  cp_cli sandbox logs "$SB"
al_ok "pause" cp_cli sandbox pause "$SB"
al_match "ls shows it paused" "$SB +base +paused" cp_cli sandbox ls
al_ok "resume" cp_cli sandbox resume "$SB" --timeout 120
al_match "exec after resume" '^again$' cp_cli sandbox exec "$SB" -- echo again
al_match "exec: options after the ID, as the usage shows" '^/tmp v$' \
  cp_cli sandbox exec "$SB" --cwd /tmp --env V=v -- 'echo $(pwd) $V'
al_match "exec: options before the ID" '^/tmp w$' \
  cp_cli sandbox exec --cwd /tmp --env V=w "$SB" -- 'echo $(pwd) $V'
# Failures: exit status 1 and a message that says why.
fails_with() { "$@" 2>&1; [ $? = 1 ]; }
al_note "snapshot, rollback, fork: refused by the test backend, saying why (snap_api: a jail)"
al_match "snapshot" "501: cannot snapshot sandbox $SB: the test backend has no snapshots" \
  fails_with cp_cli sandbox snapshot "$SB" --name n1
al_match "snapshot: a bad name is airlockd's 400" "400: name: must be 1 to 64" \
  fails_with cp_cli sandbox snapshot "$SB" --name ../x
al_match "rollback to a snapshot that does not exist" 'snapshot "snap_aaaaaaaaaaaaaaaaaaa0" not found' \
  fails_with cp_cli sandbox rollback "$SB" snap_aaaaaaaaaaaaaaaaaaa0
al_match "rollback: usage" "wants ID SNAPSHOT" usage_error cp_cli sandbox rollback "$SB"
al_match "fork" "501: cannot fork sandbox $SB: the test backend has no snapshots" \
  fails_with cp_cli sandbox fork "$SB" --count 2
al_match "fork --count 0: a usage error" "--count wants a whole number from 1" \
  usage_error cp_cli sandbox fork "$SB" --count 0
al_match "fork --count x: a usage error" "not 'x'" usage_error cp_cli sandbox fork "$SB" --count x
al_match "fork beyond sandboxes.max_fork: airlockd's 400" "400: .*sandboxes.max_fork" \
  fails_with cp_cli sandbox fork "$SB" --count 101
al_match "fork of a sandbox that does not exist" '404: sandbox "nosuchsandbox" not found' \
  fails_with cp_cli sandbox fork nosuchsandbox
al_eq "snapshot ls --json: none" "$(cp_cli snapshot ls --json)" "[]"
al_match "snapshot ls: the header" "^ID +SANDBOX +TEMPLATE +SIZE +CREATED +NAMES$" cp_cli snapshot ls
al_match "snapshot rm of none: not found" 'snapshot "snap_aaaaaaaaaaaaaaaaaaa0" not found' \
  fails_with cp_cli snapshot rm snap_aaaaaaaaaaaaaaaaaaa0
al_ok "kill" cp_cli sandbox kill "$SB"
al_fail "kill again: not found" cp_cli sandbox kill "$SB"
al_match "create with an unknown template: the reason" "template 'nope' not found" \
  fails_with cp_cli sandbox create nope
al_match "a wrong state directory: the reason" "cannot reach airlockd" \
  fails_with "$AIRLOCK_BIN/airlock" --state-dir "$AL_TMP/nowhere" sandbox ls
"$AIRLOCK_BIN/airlock" sandbox frob >/dev/null 2>&1
al_eq "an unknown command is a usage error" "$?" 2

al_kill airlockd TERM
al_eq "nothing left" "$(cp_leaks_settled)" ""
al_done
