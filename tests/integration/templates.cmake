# controlplane/templates (included by tests/integration/CMakeLists.txt): images pulled from a
# registry in the test world and unpacked by the confined helper.
airlock_script_test(NAME templates_oci SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/templates_oci.sh
                    LABELS controlplane templates TIMEOUT 900)
# deploy/templates/build's fetching: retries on network errors only, a clear last error.
airlock_script_test(NAME templates_fetch SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/templates_fetch.sh
                    LABELS templates TIMEOUT 300)
# Builds with a network: a RUN step's pip install from a fake package index through
# airlock-egress, refused under the default build policy, allowed (intercepted) under one
# that opens it; both audited under the build's name.
airlock_script_test(NAME templates_net SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/templates_net.sh
                    LABELS controlplane templates TIMEOUT 900)
# A RUN step as root is a package manager's root: apt-get install from a fake Debian
# repository through airlock-egress installs files of another user; the step's root has the
# build sandbox's capabilities, a step as user and every sandbox of the template none.
airlock_script_test(NAME templates_apt SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/templates_apt.sh
                    LABELS controlplane templates TIMEOUT 900)
