# deploy/ integration tests (included by tests/integration/CMakeLists.txt): the install script
# and the systemd unit, into a temporary destdir (no network, nothing outside it).
airlock_script_test(NAME deploy_install SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/deploy_install.sh
                    LABELS deploy TIMEOUT 120)
