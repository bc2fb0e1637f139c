#!/usr/bin/env bash
# tests/integration/lifecycle_audit.sh: the lifecycle events that change a sandbox's files
# (a snapshot taken, a rollback to it, a fork, a snapshot deleted) are records of the audit
# log too, in the chain airlock-egress writes (type "lifecycle", with the sandbox, the event's
# id, the cause and the key that asked), and the chain verifies with them in it; the proxy
# still refuses control-plane records of its own types. Jail sandboxes, network on.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
[ -x "$AIRLOCK_BIN/airlock-vmm" ] || { echo "lifecycle_audit: airlock-vmm is not built: SKIP"; exit 0; }
cp_world lifecycle_audit jail
cp_start || exit 1
json() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
lrecs() { cp_cli audit query --type lifecycle --json; }

A=$(cp_create '{"templateID":"base","timeout":600}')
al_match "a sandbox" '^[a-z0-9]+$' echo "$A"
al_ok "a file written in it" cp_exec "$A" sh -c 'echo one > /home/user/f'
OUT=$(cp_api -X POST "$CP_URL/sandboxes/$A/snapshots" -d '{"name":"la"}')
S=$(json "$OUT" snapshotID)
al_match "a snapshot of it" '.' echo "$S"
cp_audit_match "the snapshot is in the audit log: the sandbox, the cause, the key" \
  "\"type\":\"lifecycle\".*\"event\":\"checkpointed\".*" --type lifecycle --json
al_match "... naming the sandbox and the key that asked" \
  "\"event\":\"checkpointed\".*\"sandbox\":\"$A\"" lrecs
al_eq "... every lifecycle record has the key" "$(lrecs | grep -vc '"api_key_id":"[a-z0-9_]*"')" 0

al_ok "the file changed" cp_exec "$A" sh -c 'echo two > /home/user/f'
al_match "rollback to the snapshot" "\"snapshotID\":\"$S\"" \
  cp_api -X POST "$CP_URL/sandboxes/$A/rollback" -d "{\"snapshotID\":\"$S\"}"
al_eq "... restored the file" "$(cp_exec "$A" cat /home/user/f)" one
cp_audit_match "the rollback is in the audit log" \
  "\"event\":\"rolled_back\".*\"sandbox\":\"$A\"" --type lifecycle --json

al_eq "a fork of one: 201" "$(cp_api -o /dev/null -w '%{http_code}' -X POST \
  "$CP_URL/sandboxes/$A/fork" -d '{"count":1,"timeout":600}')" 201
cp_audit_match "the fork is in the audit log" \
  "\"event\":\"forked\".*\"sandbox\":\"$A\"" --type lifecycle --json

al_eq "the snapshot deleted: DELETE /templates/$S" \
  "$(cp_api -o /dev/null -w '%{http_code}' -X DELETE "$CP_URL/templates/$S")" 204
cp_audit_match "its deletion is in the audit log" \
  "\"event\":\"snapshot_deleted\"" --type lifecycle --json
al_eq "each record carries the id of its event in GET /events (the same uuid)" \
  "$(lrecs | grep -vc '"event_id":"[0-9a-f-]\{36\}"')" 0
al_ok "the audit log verifies with them in its chain" cp_cli audit verify

ESOCK="$CP_STATE/run/egress.sock"
al_eq "the proxy refuses a control-plane record of its own types: 400" \
  "$(curl -sS --unix-socket "$ESOCK" -o /dev/null -w '%{http_code}' -X POST \
      http://egress/v1/audit/records -d '{"type":"sandbox","event":"register"}')" 400
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
