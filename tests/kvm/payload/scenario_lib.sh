# tests/kvm/payload/scenario_lib.sh: helpers for the scenarios, which run in L1 under
# busybox sh (kvm_l1_root installs this file as /scenario-lib.sh; a scenario sources it).
#
# Every wait of a scenario ends at a bound on L1's clock (which runs at the host's wall
# clock) and, when it fails, says what it waited for. A wait that may take minutes prints a
# line at least once a minute: the harness ends an L1 whose console stays silent for
# AIRLOCK_KVM_SILENT_TIMEOUT seconds (see tests/kvm/lib.sh), the net under waits that have
# no bound of their own.

# l1_now: L1's uptime in whole seconds.
l1_now() { cut -d. -f1 /proc/uptime; }

# wait_for SECONDS WHAT CMD...: runs CMD every 0.1 s until it succeeds; after SECONDS (of
# L1's clock) prints "FAILED: WHAT: not within SECONDS s" and returns 1. Prints "still
# waiting for WHAT" once a minute meanwhile.
wait_for() {
  _wf_s=$1 _wf_end=$(($(l1_now) + $1)) _wf_said=$(l1_now) _wf_what=$2
  shift 2
  until "$@"; do
    if [ "$(l1_now)" -ge "$_wf_end" ]; then
      echo "FAILED: $_wf_what: not within $_wf_s s"
      return 1
    fi
    if [ $(($(l1_now) - _wf_said)) -ge 60 ]; then
      _wf_said=$(l1_now)
      echo "still waiting for $_wf_what ($((_wf_end - _wf_said)) s left)"
    fi
    sleep 0.1
  done
}

# wait_exit PID WHAT [SECONDS]: the exit status of PID (a child of the scenario) once it has
# ended, for a process asked to end or bound to end by itself (WHAT: "stop", "SIGTERM", "the
# guest's checks and reset", ...). SECONDS (default 120) of L1's clock after WHAT (far beyond
# a loaded run's time) it prints the state, kernel wait channel and stack of each of its
# threads, kills it and returns 125, rather than leaving the harness to end an idle L1.
# A guest run to its end (a VMM in the foreground of a scenario) gets 900 s: it is busy, and
# at a load of 20 the garbage scenario's VMM still ran after 300 s; the harness's bound on
# QEMU's CPU time ends one that spins.
wait_exit() {
  _we_s=${3:-120} _we_end=$(($(l1_now) + ${3:-120})) _we_said=$(l1_now)
  while [ -e /proc/$1 ] && [ "$(cut -d' ' -f3 /proc/$1/stat 2>/dev/null)" != Z ]; do
    if [ "$(l1_now)" -ge "$_we_end" ]; then
      echo "$(cat /proc/$1/comm 2>/dev/null) ($1) still running $_we_s s after $2; its threads:"
      for _t in /proc/$1/task/*; do
        echo "  $(cat $_t/comm) $(cut -d' ' -f3 $_t/stat) $(cat $_t/wchan 2>/dev/null) $(head -4 $_t/stack 2>/dev/null | tr '\n' ' ')"
      done
      kill -KILL $1
      wait $1 || true
      return 125
    fi
    if [ $(($(l1_now) - _we_said)) -ge 60 ]; then
      _we_said=$(l1_now)
      echo "still waiting for $(cat /proc/$1/comm 2>/dev/null) ($1) to end after $2 ($((_we_end - _we_said)) s left)"
    fi
    sleep 0.1
  done
  wait $1
}
