/* cli/cp: the CLI groups of the control plane (`airlock sandbox`, `airlock apikey`, `airlock
 * template`), dispatched by cli/main.c, and their one client of airlockd's local socket. */
#ifndef AIRLOCK_CLI_CP_H
#define AIRLOCK_CLI_CP_H

#include <jansson.h>
#include <stdbool.h>

struct cp_store;
struct al_http_resp;
struct al_http_header;

int sandbox_cli_main(int argc, char **argv);
/* `airlock events ls|tail` (in sandbox.c: the same client of airlockd's socket). */
int events_cli_main(int argc, char **argv);
/* `airlock snapshot ls|rm` (in sandbox.c: the same client). */
int snapshot_cli_main(int argc, char **argv);
int apikey_cli_main(int argc, char **argv);
/* `airlock cluster` (cluster.c). */
int cluster_cli_main(int argc, char **argv);
/* `airlock template` (template.c). */
int template_cli_main(int argc, char **argv);
/* One request of the E2B API to airlockd's local socket (<state>/run/airlockd.sock, no API
 * key needed there): body (may be NULL) as JSON; *status, and *out the parsed answer (may
 * be NULL) or raw the whole response (may be NULL; al_http_resp_free it). The message of a
 * 4xx or 5xx is printed. -1 (printed) when airlockd cannot be reached. */
int cp_cli_call(const char *method, const char *path, json_t *body, int *status, json_t **out,
                struct al_http_resp *raw);
/* A request of cp_cli_call_with: cp_cli_call's method, path and body, and n_headers more
 * request headers (e.g. X-Airlock-Build-Policy). */
struct cp_cli_req {
    const char *method, *path;
    const struct al_http_header *headers;
    size_t n_headers;
    json_t *body;
};
int cp_cli_call_with(const struct cp_cli_req *rq, int *status, json_t **out,
                     struct al_http_resp *raw);
/* v as indented JSON on stdout. */
void cp_cli_print(json_t *v);
/* Opens <state>/airlockd.db for a CLI command (creating the directory if create), printing
 * what went wrong. */
int cp_cli_open_store(struct cp_store **out, bool create);

#endif
