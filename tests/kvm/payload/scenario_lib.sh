# tests/kvm/payload/scenario_lib.sh: helpers for the scenarios, which run in L1 under
# busybox sh (kvm_l1_root installs this file as /scenario-lib.sh; a scenario sources it).

# wait_exit PID WHAT: the exit status of PID (a child of the scenario) once it has ended,
# for a process asked to end (WHAT: "stop", "SIGTERM", ...), which must not need the guest's
# cooperation to do so. 120 s of L1's clock after WHAT (far beyond a loaded run's seconds)
# it prints the state, kernel wait channel and stack of each of its threads, kills it and
# returns 125, rather than leaving the harness to end an idle L1 after its wall bound.
wait_exit() {
  _n=0
  while [ -e /proc/$1 ] && [ "$(cut -d' ' -f3 /proc/$1/stat 2>/dev/null)" != Z ]; do
    if [ $_n -ge 1200 ]; then
      echo "$(cat /proc/$1/comm 2>/dev/null) ($1) still running 120 s after $2; its threads:"
      for _t in /proc/$1/task/*; do
        echo "  $(cat $_t/comm) $(cut -d' ' -f3 $_t/stat) $(cat $_t/wchan 2>/dev/null) $(head -4 $_t/stack 2>/dev/null | tr '\n' ' ')"
      done
      kill -KILL $1
      wait $1 || true
      return 125
    fi
    sleep 0.1
    _n=$((_n + 1))
  done
  wait $1
}
