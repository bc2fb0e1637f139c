# The agent's Python kernel: start, memory and per-execution latency against the previous
# kernel of a git revision and Jupyter's ipykernel (bench/kernel_bench.sh, kernel_bench.py).
if(AIRLOCK_TESTS)
  add_test(NAME kernel_bench_smoke COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/kernel_bench.sh
           --rounds 1 --execs 5)
  set_tests_properties(kernel_bench_smoke PROPERTIES LABELS "bench;agent" TIMEOUT 300)
endif()
