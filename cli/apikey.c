/* cli/apikey: `airlock apikey create|ls|revoke`.
 *
 * Works on the state database directly (<state>/airlockd.db), whether or not airlockd
 * runs: airlockd notices changes made by other connections before it authenticates the
 * next request (store.h), so a revoked key stops working at once. Only the key's digest is
 * stored; `create` prints the key once and nobody can show it again.
 */
#include <errno.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"
#include "common/paths.h"
#include "common/util.h"
#include "cli/cp.h"
#include "controlplane/ids.h"
#include "controlplane/store.h"

static void apikey__usage(FILE *f)
{
    fprintf(f,
            "usage: airlock [--state-dir DIR] apikey <command>\n"
            "\n"
            "  create [NAME] [--role ROLE] [--policies LIST]\n"
            "                                    make a key and print it (once)\n"
            "                                    ROLE: admin (everything, the default),\n"
            "                                    operator (sandboxes, templates, snapshots;\n"
            "                                    no audit log, no secret writes) or auditor\n"
            "                                    (the audit log, what exists; reads only,\n"
            "                                    no sandbox's commands or files)\n"
            "                                    LIST: \"*\" (any policy, the default) or\n"
            "                                    policy names separated by commas: the\n"
            "                                    policies sandboxes of this key may use\n"
            "                                    through metadata[\"airlock.policy\"]\n"
            "  ls [--json]                       list keys (never the keys themselves)\n"
            "  revoke ID|NAME                    revoke a key (takes effect at once)\n"
            "\n"
            "Keys live (as digests) in %s/airlockd.db.\n",
            al_state_dir());
}

int cp_cli_open_store(struct cp_store **out, bool create)
{
    char path[4200];
    struct stat st;
    if (stat(al_state_dir(), &st) < 0 || !S_ISDIR(st.st_mode)) {
        if (!create) {
            fprintf(stderr,
                    "airlock: no state directory %s (start airlockd first, or pass "
                    "--state-dir DIR)\n",
                    al_state_dir());
            return -ENOENT;
        }
        int rc = al_mkdir_p(al_state_dir(), 0700);
        if (rc) {
            fprintf(stderr, "airlock: cannot create the state directory %s: %s\n", al_state_dir(),
                    strerror(-rc));
            return rc;
        }
    }
    if (!al_state_path(path, sizeof path, "airlockd.db")) {
        fprintf(stderr, "airlock: the state directory path is too long\n");
        return -ENAMETOOLONG;
    }
    struct al_error err = {0};
    int rc = cp_store_open(path, out, &err);
    if (rc)
        fprintf(stderr, "airlock: %s\n", al_error_str(&err));
    return rc;
}

static int apikey__create(int argc, char **argv)
{
    const char *name = NULL, *policies = "*", *role = "admin";
    static const struct option opts[] = {{"policies", required_argument, NULL, 'p'},
                                         {"role", required_argument, NULL, 'r'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:r:h", opts, NULL)) != -1) {
        if (c == 'p') {
            policies = optarg;
        } else if (c == 'r') {
            role = optarg;
        } else if (c == 'h') {
            apikey__usage(stdout);
            return 0;
        } else {
            apikey__usage(stderr);
            return 2;
        }
    }
    if (optind < argc)
        name = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "airlock apikey create: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    struct al_error err = {0};
    struct cp_apikey k;
    char key[CP_APIKEY_LEN + 1];
    if (cp_apikey_make(&k, key, name, role, policies, &err)) {
        fprintf(stderr, "airlock apikey create: %s\n", al_error_str(&err));
        return 2;
    }
    struct cp_store *s;
    if (cp_cli_open_store(&s, true)) {
        sodium_memzero(key, sizeof key);
        return 1;
    }
    int rc = cp_store_key_insert(s, &k, &err);
    cp_store_close(s);
    if (rc) {
        sodium_memzero(key, sizeof key);
        fprintf(stderr, "airlock apikey create: %s\n", al_error_str(&err));
        return 1;
    }
    fprintf(stderr, "created API key %s (%s), role: %s, policies: %s. It is shown once, now:\n",
            k.id, k.name, cp_role_name(k.role), k.policies);
    printf("%s\n", key);
    sodium_memzero(key, sizeof key);
    return 0;
}

static void apikey__time(char *out, size_t len, uint64_t ns)
{
    if (!ns)
        snprintf(out, len, "-");
    else
        al_time_rfc3339(out, len, ns);
}

static int apikey__ls(int argc, char **argv)
{
    bool as_json = argc > 1 && strcmp(argv[1], "--json") == 0;
    if (argc > (as_json ? 2 : 1)) {
        apikey__usage(stderr);
        return 2;
    }
    struct cp_store *s;
    if (cp_cli_open_store(&s, false))
        return 1;
    struct cp_apikey *v = NULL;
    size_t n = 0;
    struct al_error err = {0};
    int rc = cp_store_key_list(s, &v, &n, &err);
    cp_store_close(s);
    if (rc) {
        fprintf(stderr, "airlock apikey ls: %s\n", al_error_str(&err));
        return 1;
    }
    json_t *arr = as_json ? json_array() : NULL;
    if (!as_json)
        printf("%-12s  %-20s  %-8s  %-24s  %-24s  %-8s  %s\n", "ID", "NAME", "ROLE", "CREATED",
               "LAST USED", "STATUS", "POLICIES");
    for (size_t i = 0; i < n; i++) {
        char c[40], u[40], r[40];
        apikey__time(c, sizeof c, v[i].created_ns);
        apikey__time(u, sizeof u, v[i].last_used_ns);
        apikey__time(r, sizeof r, v[i].revoked_ns);
        if (as_json) {
            json_t *o =
                json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "id", v[i].id, "name", v[i].name, "role",
                          cp_role_name(v[i].role), "created_at", c, "last_used_at", u, "policies",
                          v[i].policies, "status", v[i].revoked_ns ? "revoked" : "valid");
            if (v[i].revoked_ns)
                json_object_set_new(o, "revoked_at", json_string(r));
            json_array_append_new(arr, o);
        } else {
            printf("%-12s  %-20s  %-8s  %-24s  %-24s  %-8s  %s\n", v[i].id, v[i].name,
                   cp_role_name(v[i].role), c, u, v[i].revoked_ns ? "revoked" : "valid",
                   v[i].policies);
        }
    }
    if (as_json) {
        char *t = json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", t ? t : "[]");
        free(t);
        json_decref(arr);
    }
    free(v);
    return 0;
}

static int apikey__revoke(int argc, char **argv)
{
    if (argc != 2) {
        apikey__usage(stderr);
        return 2;
    }
    struct cp_store *s;
    if (cp_cli_open_store(&s, false))
        return 1;
    struct cp_apikey k;
    struct al_error err = {0};
    int rc = cp_store_key_get(s, argv[1], &k, &err);
    if (!rc)
        rc = cp_store_key_revoke(s, k.id, al_wall_ns(), &err);
    cp_store_close(s);
    if (rc) {
        fprintf(stderr, "airlock apikey revoke: %s\n", al_error_str(&err));
        return 1;
    }
    printf("revoked API key %s (%s)\n", k.id, k.name);
    return 0;
}

int apikey_cli_main(int argc, char **argv)
{
    if (sodium_init() < 0) {
        fprintf(stderr, "airlock: libsodium failed to initialise\n");
        return 1;
    }
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        apikey__usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "create") == 0)
        return apikey__create(argc - 1, argv + 1);
    if (strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "list") == 0)
        return apikey__ls(argc - 1, argv + 1);
    if (strcmp(argv[1], "revoke") == 0)
        return apikey__revoke(argc - 1, argv + 1);
    fprintf(stderr, "airlock apikey: unknown command '%s'\n\n", argv[1]);
    apikey__usage(stderr);
    return 2;
}
