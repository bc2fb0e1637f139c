# Snapshots (included by tests/integration/CMakeLists.txt): jail file system snapshots
# through airlock-vmm's API and restores from them (need root, like the jail tests).
airlock_script_test(NAME snap_jail SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/snap_jail.sh
                    LABELS vmm jail snap TIMEOUT 600)
# The snapshot API of airlockd on jail sandboxes across SIGKILL and restarts of airlockd.
airlock_script_test(NAME snap_api SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/snap_api.sh
                    LABELS controlplane jail snap TIMEOUT 600)
# The snapshot store encrypted at rest (at_rest.encrypt on) on a private ext4 image.
airlock_script_test(NAME snap_atrest SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/snap_atrest.sh
                    LABELS controlplane jail snap TIMEOUT 600)
# Paused sandboxes' files and volumes encrypted at rest (at_rest.encrypt on), the same way.
airlock_script_test(NAME atrest_state SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/atrest_state.sh
                    LABELS controlplane jail snap TIMEOUT 600)
# Per-volume sizes (ENOSPC inside a jail sandbox) and the audit records of volume operations.
airlock_script_test(NAME volumes_jail SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/volumes_jail.sh
                    LABELS controlplane jail snap TIMEOUT 600)
# Snapshots, rollbacks, forks and snapshot deletions as records of the audit log's chain.
airlock_script_test(NAME lifecycle_audit SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/lifecycle_audit.sh
                    LABELS controlplane jail snap TIMEOUT 600)
