/* vault/vault_http: the daemon's HTTP server on its unix socket (needs common/http). */
#ifndef AIRLOCK_VAULT_HTTP_H
#define AIRLOCK_VAULT_HTTP_H

#include <uv.h>

#include "common/http.h"
#include "vault/vault.h"

struct vault_httpd;

struct vault_httpd_opts {
    struct vault_service *svc;
    struct vault_store *store;
    const char *sock; /* the socket's path */
    mode_t mode;      /* its mode */
};

/* Serves the vault API (vault_api.c) of o->svc on o->sock (created with o->mode; access is
 * decided per request from SO_PEERCRED, so the mode only limits who can ask). */
int vault_httpd_start(uv_loop_t *loop, const struct vault_httpd_opts *o, struct vault_httpd **out,
                      struct al_error *err);
/* Answers parked long-polls, closes every connection and the listener, frees, then done. */
void vault_httpd_stop(struct vault_httpd *d, void (*done)(void *arg), void *arg);

#endif
