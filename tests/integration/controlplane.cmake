# Control-plane integration tests (included by tests/integration/CMakeLists.txt). Each builds
# its own network-namespace world; airlockd always runs with --listen 127.0.0.1:<free port>
# and --state-dir <tmp>, with its own cgroup parent.
airlock_script_test(NAME cp_egress SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_egress.sh
                    LABELS controlplane TIMEOUT 900)
airlock_script_test(NAME cp_netupdate SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_netupdate.sh
                    LABELS controlplane egress TIMEOUT 900)
airlock_script_test(NAME cp_restart_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_restart.sh
                    ARGS test LABELS controlplane TIMEOUT 900)
airlock_script_test(NAME cp_restart_jail SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_restart.sh
                    ARGS jail LABELS controlplane TIMEOUT 900)
airlock_script_test(NAME cp_load_jail SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_load.sh
                    ARGS jail 200 50 LABELS controlplane TIMEOUT 900)
airlock_script_test(NAME cp_cli SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_cli.sh
                    LABELS controlplane TIMEOUT 300)
# Lifecycle events: recorded with their causes, listed as E2B does, streamed, kept.
airlock_script_test(NAME cp_events SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_events.sh
                    LABELS controlplane TIMEOUT 600)
# The web console in Debian's chromium (puppeteer-core from npm, tests/console/).
airlock_script_test(NAME cp_console SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_console.sh
                    LABELS controlplane console TIMEOUT 600)
airlock_script_test(NAME cp_forward SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_forward.sh
                    LABELS controlplane TIMEOUT 900)
# Credential injection and E2B network narrowing end to end through airlockd and the real E2B
# SDK (tests/e2b/sdk-driver.mjs), airlock-vault and airlock-egress as airlockd runs them.
airlock_script_test(NAME cp_intercept SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_intercept.sh
                    LABELS controlplane intercept e2b TIMEOUT 900)
# API-given header transforms (E2B network.rules) through airlockd and airlock-vault with the
# real E2B SDK (test backend; the injection is intercept_transforms's).
airlock_script_test(NAME cp_transforms SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_transforms.sh
                    LABELS controlplane e2b TIMEOUT 600)
# The disk reserve: a small tmpfs state directory filled below the reserve, then full.
airlock_script_test(NAME cp_disk SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_disk.sh
                    LABELS controlplane e2b TIMEOUT 900)
# A creation that fails after the network was taken and egress registered is undone whole.
airlock_script_test(NAME cp_rollback SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_rollback.sh
                    LABELS controlplane TIMEOUT 600)
# The backend choice (the real KVM probe on this host; forced modes) and the KVM sandbox
# spec with its vswitch tap (a fake airlock-vmm records what airlockd hands it).
airlock_script_test(NAME cp_backend SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_backend.sh
                    LABELS controlplane TIMEOUT 600)
# on_shutdown: keep: airlockd exits at once on SIGTERM, and the next one re-adopts.
airlock_script_test(NAME cp_keep SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_keep.sh
                    LABELS controlplane TIMEOUT 600)
# Both pools are full again right after a burst; each creation's stages are timed.
airlock_script_test(NAME cp_pools SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_pools.sh
                    LABELS controlplane TIMEOUT 600)
# Warm sandboxes: started without identity or egress, claimed by a creation (its id, its
# identity through the agent's init), working like a cold one; what ran before the claim sees
# nothing of it; the pool refills; warm and cold claims counted; a killed airlockd's warm
# sandbox torn down by the next.
airlock_script_test(NAME cp_warm SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_warm.sh
                    LABELS controlplane TIMEOUT 900)
# When the pools refill: after the creations paused for sandboxes.refill_quiet, or at once when
# one is below half its size.
airlock_script_test(NAME cp_refill SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_refill.sh
                    LABELS controlplane TIMEOUT 600)
# The limits of all sandboxes together: a sandbox that fills them does not stop airlockd,
# airlock-egress or a neighbour; a new sandbox is refused with a 503 that says why.
airlock_script_test(NAME cp_hostlimits SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_hostlimits.sh
                    LABELS controlplane TIMEOUT 900)
# Lifecycle webhooks: registration, signed deliveries retried and recorded, https to the
# checked address, internal targets refused also when the name changes, a bounded queue.
airlock_script_test(NAME cp_webhooks SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cp_webhooks.sh
                    LABELS controlplane TIMEOUT 600)
# Pauses that survive airlockd's SIGKILL and a restart of the host: without memory (files
# only, a boot at the resume) and with memory (its files kept on disk as well).
airlock_script_test(NAME jail_persist_pause SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/jail_persist_pause.sh
                    LABELS controlplane jail TIMEOUT 900)
