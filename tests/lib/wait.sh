# tests/lib/wait.sh: waiting for a condition, not for a time (sourced by tests/lib/netns.sh
# and tests/integration/jail_lib.sh).
#
#   al_wait_until SECONDS CMD...   runs CMD until it succeeds; fails after SECONDS (a bound
#                                  for a machine loaded by other builds and tests: generous,
#                                  never the expected time). Polls every 50 ms at first, then
#                                  every 200 ms.
# A test that needs something to have happened waits for that very thing; a fixed sleep
# followed by a check fails whenever the machine is slower than whoever chose the sleep.
# shellcheck shell=bash
al_wait_until() {
  local secs=$1 deadline n=0
  shift
  deadline=$((SECONDS + secs))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    if [ $((n += 1)) -le 20 ]; then sleep 0.05; else sleep 0.2; fi
  done
}
