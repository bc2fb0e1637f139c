# tests/integration/intercept: TLS interception and credential injection through
# airlock-egress (issue 8), in egress's namespace world plus a fake vault and echo upstreams
# (intercept_world.sh).
foreach(t inject reflect http smuggle transforms)
  airlock_script_test(NAME intercept_${t}
    SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/intercept_${t}.sh
    LABELS intercept egress TIMEOUT 300)
endforeach()
