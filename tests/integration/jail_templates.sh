#!/usr/bin/env bash
# tests/integration/jail_templates.sh: the real templates, built by deploy/templates/build
# from Debian 12 packages (cached under /var/cache/airlock/templates by recipe hash: a cold
# build takes a few minutes, a warm one seconds), installed into a state directory, and
# used by sandboxes: the user account, the tools, Python with numpy/pandas/matplotlib for
# code-interpreter-v1, and (with the real agent) the code interpreter answering.
. "$(dirname "$0")/jail_lib.sh"
BUILD=$AIRLOCK_SOURCE_DIR/deploy/templates/build

# The hash follows the recipe: unchanged recipe, same hash; any change, a new one.
h1=$("$BUILD" --print-hash base | awk '{print $2}')
h2=$("$BUILD" --print-hash base | awk '{print $2}')
[ -n "$h1" ] && [ "$h1" = "$h2" ] || fail "the hash of an unchanged recipe is not stable ($h1, $h2)"
cp -r "$AIRLOCK_SOURCE_DIR/deploy/templates" "$T/tsrc"
echo "# changed" >> "$T/tsrc/base/recipe"
h3=$("$T/tsrc/build" --print-hash base | awk '{print $2}')
[ "$h3" != "$h1" ] || fail "a changed recipe kept the hash $h1"
"$BUILD" --print-hash nonexistent >/dev/null 2>&1 && fail "an unknown template name was accepted"
ok "recipe hash: stable, and changes with the recipe"

t0=$SECONDS
ensure_template base
ensure_template code-interpreter-v1
ok "templates built or taken from the cache in $((SECONDS - t0)) s"
# Installed again: taken from the cache, not built (what the builder says, not how long it
# took: it may wait for another job's lock on a loaded machine).
again=$(ensure_template base 2>&1)
grep -q 'base: cached' <<<"$again" || fail "a cached template was not taken from the cache: $again"
for n in base code-interpreter-v1; do
  tj=$STATE/templates/$n/template.json
  python3 - "$tj" "$n" "$("$BUILD" --print-hash "$n" | awk '{print $2}')" <<'PY' || fail "$n/template.json"
import json, sys
t = json.load(open(sys.argv[1]))
assert t["name"] == sys.argv[2], t["name"]
assert t["user"] == "user" and t["workdir"] == "/home/user", t
assert t["build"]["hash"] == sys.argv[3], t["build"]
PY
  [ "$(stat -c %u:%g "$STATE/templates/$n/rootfs/home/user")" = 1000:1000 ] || fail "$n: /home/user owner"
  [ -z "$(ls -A "$STATE/templates/$n/rootfs/dev")" ] || fail "$n: /dev of the template is not empty"
  [ ! -s "$STATE/templates/$n/rootfs/etc/resolv.conf" ] || fail "$n: the build host's resolv.conf stayed"
done
ok "cached install is fast; template.json and rootfs are as specified"

jail_start tb base ',"network":{"mode":"none","dns":["192.0.2.53"]}'
out=$(jail_exec tb user 'id; echo HOME=$HOME; cd && pwd; bash --version | head -1; python3 --version; git --version; curl --version | head -1; pip3 --version; ps -o pid,comm | head -3; grep VERSION_CODENAME /etc/os-release; cat /etc/resolv.conf; touch ~/x && ls -l ~/x') ||
  fail "base: commands failed: $out"
for want in 'uid=1000(user) gid=1000(user)' 'GNU bash' 'Python 3.11' 'git version' 'curl ' 'pip ' \
            'VERSION_CODENAME=bookworm' 'nameserver 192.0.2.53' 'user user'; do
  grep -qF "$want" <<<"$out" || fail "base: no '$want' in: $out"
done
jail_stop tb
ok "base: user 1000, bash, python3, git, curl, pip, procps; the spec's resolver"

jail_start tc code-interpreter-v1
out=$(JAIL_TIMEOUT=120 jail_exec tc user "python3 -c '
import numpy as np, pandas as pd, matplotlib
matplotlib.use(\"Agg\")
import matplotlib.pyplot as plt
df = pd.DataFrame({\"x\": np.arange(5), \"y\": np.arange(5) ** 2})
print(df.y.sum())
print(\"<table\" in df.to_html())
plt.plot(df.x, df.y); plt.savefig(\"/tmp/plot.png\")
print(open(\"/tmp/plot.png\", \"rb\").read(8) == b\"\\x89PNG\\r\\n\\x1a\\n\")
'") || fail "code-interpreter-v1: python failed: $out"
[ "$(echo "$out" | tr '\n' ' ')" = "30 True True " ] || fail "code-interpreter-v1: $out"
if [ "$AGENT_KIND" = airlock-agent ]; then
  res=$(curl -s --max-time 120 --unix-socket "$(jail_sock tc)" -H "X-Access-Token: $TOKEN" \
    -H 'Content-Type: application/json' --data '{"code":"import pandas as pd\npd.DataFrame({\"a\":[1,2]}).a.sum() + 40"}' \
    http://x/execute)
  grep -q '"type":"result"' <<<"$res" && grep -q '"text":"43"' <<<"$res" ||
    fail "code-interpreter-v1: /execute did not give 43: $res"
  ok "code-interpreter-v1: the agent's code interpreter runs pandas"
fi
jail_stop tc
ok "code-interpreter-v1: numpy, pandas (HTML), matplotlib (PNG)"
echo "PASS: $JAIL_TEST"
