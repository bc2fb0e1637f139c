/* controlplane/backendsel: see backendsel.h. */
#include "backendsel.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "config.h"
#include "proc.h"

#define PROBE_OUT_MAX 8192

static uint64_t sel__ms_since(uint64_t t0)
{
    return (al_now_ns() - t0) / 1000000;
}

void cp_kvm_probe_run(const char *vmm_bin, const char *kernel, uint64_t timeout_ms,
                      uint64_t kill_after_ms, struct cp_kvm_probe *out)
{
    memset(out, 0, sizeof *out);
    uint64_t t0 = al_now_ns();
    if (access(vmm_bin, X_OK) < 0) {
        snprintf(out->reason, sizeof out->reason,
                 "cannot run the KVM probe: %s: %s (install airlock-vmm or set bin_dir)", vmm_bin,
                 strerror(errno));
        return;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        snprintf(out->reason, sizeof out->reason, "cannot run the KVM probe: pipe: %s",
                 strerror(errno));
        return;
    }
    char tmo[32];
    snprintf(tmo, sizeof tmo, "%llu", (unsigned long long)timeout_ms);
    char *argv[8];
    int n = 0;
    argv[n++] = (char *)vmm_bin;
    argv[n++] = "--probe-kvm";
    if (kernel && *kernel) {
        argv[n++] = "--kernel";
        argv[n++] = (char *)kernel;
    }
    argv[n++] = "--timeout-ms";
    argv[n++] = tmo;
    argv[n] = NULL;
    struct al_spawn s = {.path = vmm_bin, .argv = argv, .fds = {-1, p[1], 2}, .nfds = 3};
    pid_t pid;
    int pidfd;
    struct al_error err = {0};
    int rc = al_spawn(&s, &pid, &pidfd, &err);
    close(p[1]);
    if (rc) {
        close(p[0]);
        snprintf(out->reason, sizeof out->reason, "cannot run the KVM probe: %s",
                 al_error_str(&err));
        return;
    }
    out->ran = true;
    char buf[PROBE_OUT_MAX];
    size_t len;
    int st = -1;
    struct cp_proc_child child = {
        .outfd = p[0], .pid = pid, .pidfd = pidfd, .t0 = t0, .kill_after_ms = kill_after_ms};
    rc = cp_proc_collect(&child, buf, sizeof buf, &len, &st);
    close(p[0]);
    close(pidfd);
    out->elapsed_ms = sel__ms_since(t0);
    if (rc == -ETIMEDOUT) {
        snprintf(out->reason, sizeof out->reason,
                 "%s --probe-kvm did not finish within %llu ms (killed): this host's KVM is "
                 "too slow or stuck",
                 vmm_bin, (unsigned long long)kill_after_ms);
        return;
    }
    char *nl = memchr(buf, '\n', len);
    if (nl)
        *nl = '\0';
    json_t *j = json_loads(buf, 0, NULL);
    const char *why = json_string_value(json_object_get(j, "reason"));
    bool said_usable = json_is_true(json_object_get(j, "usable"));
    bool exit0 = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!json_is_object(j) || !json_is_boolean(json_object_get(j, "usable"))) {
        char how[128];
        cp_proc_describe(st, how, sizeof how);
        snprintf(out->reason, sizeof out->reason,
                 "%s --probe-kvm %s without its JSON answer (is it an older airlock-vmm?)", vmm_bin,
                 how);
    } else if (said_usable != exit0) {
        char how[128];
        cp_proc_describe(st, how, sizeof how);
        snprintf(out->reason, sizeof out->reason,
                 "%s --probe-kvm answered usable=%s but %s: not trusted", vmm_bin,
                 said_usable ? "true" : "false", how);
    } else {
        out->usable = said_usable;
        snprintf(out->reason, sizeof out->reason, "%s",
                 why && *why ? why : (said_usable ? "the probe passed" : "no reason given"));
    }
    json_decref(j);
}

int cp_backend_select(const struct cp_backend_sel_opts *o, struct cp_backend_sel *out,
                      struct al_error *err)
{
    memset(out, 0, sizeof *out);
    const char *dev = o->kvm_dev ? o->kvm_dev : CP_KVM_DEV;
    uint64_t kill_after =
        o->kill_after_ms ? o->kill_after_ms : o->timeout_ms + CP_KVM_PROBE_GRACE_MS;
    switch (o->choice) {
    case CP_BACKEND_TEST:
        snprintf(out->kind, sizeof out->kind, "test");
        snprintf(out->why, sizeof out->why, "sandboxes.backend: test");
        return 0;
    case CP_BACKEND_JAIL:
        snprintf(out->kind, sizeof out->kind, "jail");
        snprintf(out->why, sizeof out->why, "sandboxes.backend: jail; KVM not probed");
        return 0;
    case CP_BACKEND_KVM:
        cp_kvm_probe_run(o->vmm_bin, o->kernel, o->timeout_ms, kill_after, &out->probe);
        if (!out->probe.usable)
            return al_error_set(err, -ENODEV,
                                "sandboxes.backend is kvm, but this host cannot run KVM "
                                "sandboxes: %s (airlock-vmm --probe-kvm). Fix that, or set "
                                "sandboxes.backend to jail or auto",
                                out->probe.reason);
        snprintf(out->kind, sizeof out->kind, "kvm");
        snprintf(out->why, sizeof out->why, "sandboxes.backend: kvm; KVM probe: %s",
                 out->probe.reason);
        return 0;
    default:
        break;
    }
    snprintf(out->kind, sizeof out->kind, "jail");
    if (access(dev, F_OK) < 0) {
        snprintf(out->probe.reason, sizeof out->probe.reason, "no %s (%s)", dev, strerror(errno));
        snprintf(out->why, sizeof out->why,
                 "sandboxes.backend: auto; no %s, so no KVM (not probed)", dev);
        return 0;
    }
    cp_kvm_probe_run(o->vmm_bin, o->kernel, o->timeout_ms, kill_after, &out->probe);
    if (out->probe.usable) {
        snprintf(out->kind, sizeof out->kind, "kvm");
        snprintf(out->why, sizeof out->why, "sandboxes.backend: auto; KVM probe: usable: %s",
                 out->probe.reason);
    } else {
        snprintf(out->why, sizeof out->why,
                 "sandboxes.backend: auto; KVM probe: NOT usable: %s (sandboxes.backend: kvm "
                 "would refuse to start)",
                 out->probe.reason);
    }
    return 0;
}
