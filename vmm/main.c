/* vmm/main: the airlock-vmm command line: run one sandbox, or clean up after crashed ones. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/paths.h"
#include "jail/jail.h"
#include "vmm.h"

static void main__usage(FILE *f)
{
    fprintf(f,
            "usage: airlock-vmm [--state-dir DIR] [run] --spec FILE|- [--ready-fd N]\n"
            "       airlock-vmm [--state-dir DIR] --warm [--cgroup-parent P] [--memory-mib N]"
            " [--pids N] [--cpus X] --spec - --ready-fd N\n"
            "       airlock-vmm [--state-dir DIR] --cleanup ID [--keep-logs] [--wait-ms N]"
            " [--cgroup-parent P] [--uid-base N] [--uid-slots N]\n"
            "       airlock-vmm [--state-dir DIR] --sweep [--keep-logs] [--cgroup-parent P]"
            " [--uid-base N] [--uid-slots N]\n"
            "       airlock-vmm --limit-parent [--cgroup-parent P] [--pids N] [--memory-mib N]\n"
            "       airlock-vmm --probe-kvm [--kernel BZIMAGE] [--timeout-ms N]\n"
            "\n"
            "run      start the sandbox the spec describes (\"-\" reads it from standard input,\n"
            "         which keeps its access token off the disk) and supervise it until it is\n"
            "         stopped through its API (<state>/sandboxes/<id>/vmm.sock) or SIGTERM.\n"
            "         --ready-fd N: write one JSON line to fd N when the agent answers\n"
            "         /health ({\"ready\":true,...}) or when starting failed ({\"ready\":false,\n"
            "         \"error\":...}), then close it.\n"
            "--warm   prepare what needs no spec first (the sandbox's cgroups, with this process\n"
            "         already in them), write {\"warm\":true,\"vmm_pid\":N} to the ready fd, then\n"
            "         wait for the spec on standard input: a pool of warm airlock-vmm processes\n"
            "         takes process start-up and the cgroup move off the creation path.\n"
            "         --memory-mib/--pids/--cpus: the resources the spec will most likely ask\n"
            "         for (default: the spec's defaults); the cgroups get them now, and a spec\n"
            "         that asks for others has them rewritten.\n"
            "         Closing standard input (or SIGTERM) releases it unused.\n"
            "--cleanup  reclaim what a crashed airlock-vmm of sandbox ID left (cgroups, id\n"
            "         slot, files), also when it died before it wrote its record\n"
            "         (--cgroup-parent etc. as for --sweep). Refuses while that sandbox still\n"
            "         runs; --wait-ms N first waits up to N ms for its lock (the processes of\n"
            "         a killed airlock-vmm hold it until they have died).\n"
            "--sweep  reclaim every sandbox of the state directory whose airlock-vmm is gone,\n"
            "         and the cgroups and id slots of sandboxes that crashed before they had a\n"
            "         record (--cgroup-parent etc.: the values the sandboxes were started with).\n"
            "--keep-logs  keep agent.log of what is cleaned up.\n"
            "--limit-parent  set the limits of all sandboxes together on the cgroup parent\n"
            "         (default airlock; made if missing): --pids N processes, --memory-mib N\n"
            "         of memory (each absent: no limit). Prints one JSON line (parent,\n"
            "         cgroup_version, pids_max, pids_current, memory_max, memory_current; a\n"
            "         limit of null: none). airlockd runs it at start.\n"
            "--probe-kvm  can this host run KVM sandboxes? One JSON line on stdout:\n"
            "         {\"usable\":true|false,\"reason\":...,\"checks\":{...}}; exit 0 if usable,\n"
            "         1 if not. Checks /dev/kvm, a tiny guest, then boots the guest kernel\n"
            "         (--kernel, else $AIRLOCK_KVM_KERNEL, else /usr/lib/airlock/kvm/bzImage) to\n"
            "         its first console output within --timeout-ms (default 3000).\n"
            "\n"
            "Exit codes of run: 0 stopped on request, 1 could not start, 2 usage, 3 the agent\n"
            "exited on its own, 4 the agent never became healthy, 5 cleanup incomplete (run\n"
            "--cleanup). State directory: %s\n",
            al_state_dir());
}

static int main__uint(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || !*s || *end || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    al_log_init("airlock-vmm", AL_LOG_AUTO, AL_LOG_INFO);
    argc = al_take_state_dir_arg(argc, argv);
    const char *spec = NULL, *cleanup = NULL, *parent = NULL;
    bool sweep = false, keep_logs = false, warm = false, probe_kvm = false, limit_parent = false;
    const char *kernel = NULL;
    unsigned long timeout_ms = 3000;
    long ready_fd = -1, memory_mib = -1, pids = -1;
    double cpus = -1;
    unsigned long uid_base = 0, uid_slots = 0, wait_ms = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long v;
        if (strcmp(a, "run") == 0 && i == 1) {
            continue;
        } else if (strcmp(a, "--spec") == 0 && next) {
            spec = argv[++i];
        } else if (strcmp(a, "--ready-fd") == 0 && next) {
            if (main__uint(argv[++i], 65535, &v) || v < 3) {
                fprintf(stderr, "airlock-vmm: --ready-fd wants a descriptor number >= 3\n");
                return VMM_EXIT_USAGE;
            }
            ready_fd = (long)v;
        } else if (strcmp(a, "--cleanup") == 0 && next) {
            cleanup = argv[++i];
        } else if (strcmp(a, "--wait-ms") == 0 && next) {
            if (main__uint(argv[++i], 600000, &wait_ms)) {
                fprintf(stderr, "airlock-vmm: --wait-ms wants 0..600000\n");
                return VMM_EXIT_USAGE;
            }
        } else if (strcmp(a, "--probe-kvm") == 0) {
            probe_kvm = true;
        } else if (strcmp(a, "--kernel") == 0 && next) {
            kernel = argv[++i];
        } else if (strcmp(a, "--timeout-ms") == 0 && next) {
            if (main__uint(argv[++i], 600000, &timeout_ms) || timeout_ms < 10) {
                fprintf(stderr, "airlock-vmm: --timeout-ms wants 10..600000\n");
                return VMM_EXIT_USAGE;
            }
        } else if (strcmp(a, "--warm") == 0) {
            warm = true;
        } else if (strcmp(a, "--keep-logs") == 0) {
            keep_logs = true;
        } else if (strcmp(a, "--sweep") == 0) {
            sweep = true;
        } else if (strcmp(a, "--limit-parent") == 0) {
            limit_parent = true;
        } else if (strcmp(a, "--cgroup-parent") == 0 && next) {
            parent = argv[++i];
        } else if (strcmp(a, "--memory-mib") == 0 && next) {
            if (main__uint(argv[++i], 1u << 30, &v) || v < 16) {
                fprintf(stderr, "airlock-vmm: --memory-mib wants a number of MiB >= 16\n");
                return VMM_EXIT_USAGE;
            }
            memory_mib = (long)v;
        } else if (strcmp(a, "--pids") == 0 && next) {
            if (main__uint(argv[++i], 1u << 22, &v) || v < 8) {
                fprintf(stderr, "airlock-vmm: --pids wants a number in 8..4194304\n");
                return VMM_EXIT_USAGE;
            }
            pids = (long)v;
        } else if (strcmp(a, "--cpus") == 0 && next) {
            char *end;
            cpus = strtod(argv[++i], &end);
            if (*end || !(cpus >= 0.01 && cpus <= 1024)) {
                fprintf(stderr, "airlock-vmm: --cpus wants a number in 0.01..1024\n");
                return VMM_EXIT_USAGE;
            }
        } else if (strcmp(a, "--uid-base") == 0 && next) {
            if (main__uint(argv[++i], 0xfffeffffu, &uid_base) || uid_base < 65536) {
                fprintf(stderr, "airlock-vmm: --uid-base wants a number >= 65536\n");
                return VMM_EXIT_USAGE;
            }
        } else if (strcmp(a, "--uid-slots") == 0 && next) {
            if (main__uint(argv[++i], 65535, &uid_slots) || uid_slots == 0) {
                fprintf(stderr, "airlock-vmm: --uid-slots wants a number in 1..65535\n");
                return VMM_EXIT_USAGE;
            }
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            main__usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "airlock-vmm: unknown or incomplete argument '%s'\n\n", a);
            main__usage(stderr);
            return VMM_EXIT_USAGE;
        }
    }
    if (probe_kvm) {
        if (spec || cleanup || sweep || warm) {
            fprintf(stderr, "airlock-vmm: --probe-kvm goes alone (with --kernel, --timeout-ms)\n");
            return VMM_EXIT_USAGE;
        }
        al_log_init("airlock-vmm", AL_LOG_AUTO, AL_LOG_WARN); /* stdout is the answer */
        json_t *r = vmm_kvm_probe_json(kernel, (unsigned)timeout_ms);
        char *out = json_dumps(r, JSON_COMPACT);
        bool usable = json_is_true(json_object_get(r, "usable"));
        json_decref(r);
        printf("%s\n", out ? out : "{\"usable\":false,\"reason\":\"out of memory\"}");
        free(out);
        return usable ? 0 : 1;
    }
    if (limit_parent) {
        if (spec || cleanup || sweep || warm || cpus > 0) {
            fprintf(stderr, "airlock-vmm: --limit-parent goes alone (with --cgroup-parent, "
                            "--pids, --memory-mib)\n");
            return VMM_EXIT_USAGE;
        }
        struct jail_cg_limits lim = {
            .memory_bytes = memory_mib > 0 ? (uint64_t)memory_mib << 20 : 0,
            .pids = pids > 0 ? (uint32_t)pids : 0,
        };
        struct al_error err = {0};
        json_t *r = jail_limit_parent(parent ? parent : "airlock", &lim, &err);
        if (!r) {
            fprintf(stderr, "airlock-vmm: --limit-parent: %s\n", al_error_str(&err));
            return 1;
        }
        char *out = json_dumps(r, JSON_COMPACT);
        json_decref(r);
        printf("%s\n", out ? out : "{}");
        free(out);
        return 0;
    }
    if (kernel) {
        fprintf(stderr, "airlock-vmm: --kernel goes with --probe-kvm (a sandbox's kernel is "
                        "spec.kvm.kernel)\n");
        return VMM_EXIT_USAGE;
    }
    if (!!spec + !!cleanup + sweep != 1) {
        fprintf(stderr, "airlock-vmm: give exactly one of --spec, --cleanup, --sweep, "
                        "--probe-kvm\n\n");
        main__usage(stderr);
        return VMM_EXIT_USAGE;
    }
    if (warm && (!spec || strcmp(spec, "-") != 0 || ready_fd < 0)) {
        fprintf(stderr, "airlock-vmm: --warm needs --spec - and --ready-fd N\n");
        return VMM_EXIT_USAGE;
    }
    if (spec) {
        json_t *wo = json_object();
        if (parent)
            json_object_set_new(wo, "cgroup_parent", json_string(parent));
        if (memory_mib > 0)
            json_object_set_new(wo, "memory_mib", json_integer(memory_mib));
        if (pids > 0)
            json_object_set_new(wo, "pids", json_integer(pids));
        if (cpus > 0)
            json_object_set_new(wo, "cpus", json_real(cpus));
        struct vmm_opts o = {
            .spec_path = spec, .ready_fd = (int)ready_fd, .warm = warm, .warm_opts = wo};
        int rc = vmm_run(&o);
        json_decref(wo);
        return rc;
    }
    struct al_error err = {0};
    json_t *d = json_object();
    if (parent)
        json_object_set_new(d, "cgroup_parent", json_string(parent));
    if (uid_base)
        json_object_set_new(d, "uid_base", json_integer((json_int_t)uid_base));
    if (uid_slots)
        json_object_set_new(d, "uid_slots", json_integer((json_int_t)uid_slots));
    if (cleanup) {
        int rc = vmm_cleanup(cleanup, d, keep_logs, (unsigned)wait_ms, &err);
        json_decref(d);
        if (rc) {
            fprintf(stderr, "airlock-vmm: %s\n", al_error_str(&err));
            return 1;
        }
        return 0;
    }
    int rc = vmm_sweep(d, keep_logs, &err);
    json_decref(d);
    if (rc < 0) {
        fprintf(stderr, "airlock-vmm: sweep: %s\n", al_error_str(&err));
        return 1;
    }
    printf("airlock-vmm: sweep reclaimed %d sandbox resource set%s\n", rc, rc == 1 ? "" : "s");
    return 0;
}
