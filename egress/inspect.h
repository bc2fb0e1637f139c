/* egress/inspect: the INSPECT branch of airlock-egress (issue 8): binds the interception
 * library (egress/intercept/, docs/egress-intercept.md) to the proxy.
 *
 * Owns the glue at each level:
 *   instance  the upstream trust roots (--upstream-ca) and the vault client with its changes
 *             feed on the control loop (--vault-socket);
 *   worker    the upstream connection pool and the vault fetcher of its loop;
 *   sandbox   its CA (created at registration from the names its policy intercepts), the TLS
 *             server configuration with its ticket keys, its placeholders (kept across policy
 *             reloads); the register answer carries "caCertPem", "caFingerprint" and
 *             "placeholders" for the control plane;
 *   connection a TLS connection whose rule inspects it, after the destination check (conn.c),
 *             or a plain-HTTP connection handed over at a request whose rule injects (http.c):
 *             the session (egress/intercept/session.c) on the connection's sockets, watched
 *             through the worker's epoll set, with the connection's timer as its deadline,
 *             its records completed with the connection's common fields and written to the
 *             audit log, its upstream dialled on the address the proxy checked.
 */
#ifndef AIRLOCK_EGRESS_INSPECT_H
#define AIRLOCK_EGRESS_INSPECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct egress;
struct egress_worker;
struct egress_sandbox;
struct egress_policy;
struct egress_conn;
struct egress_end;

/* ---- instance ---------------------------------------------------------------------------- */
/* Loads the upstream roots and creates the vault client. Fails (with err saying which file)
 * when the roots cannot be loaded: interception could not verify any upstream. */
int egress_inspect_init(struct egress *e, struct al_error *err);
/* The vault's changes feed, on the control loop (egress_start). */
void egress_inspect_start(struct egress *e);
/* Before the control loop closes: stops the feed. */
void egress_inspect_stop(struct egress *e);
/* After the loops are closed. */
void egress_inspect_fini(struct egress *e);

/* ---- workers ------------------------------------------------------------------------------ */
int egress_inspect_worker_init(struct egress_worker *w);
/* In the worker's stop (its connections are closed): closes the pool and the fetcher. */
void egress_inspect_worker_stop(struct egress_worker *w);
/* Plain upstream connections (http.c) in the worker's pool of idle upstreams
 * (egress/intercept/pool.h), beside the sessions' TLS ones, under (sandbox, name, port).
 * give hands fd to the pool, with the epoll slot it stays registered under (slot nonzero,
 * egress_slot_new) or none; take gives one (its fd, the caller's, and *slot: its slot, or
 * 0 when it is out of the epoll set), or -ENOENT. check: see intercept_pool_take_plain. */
int egress_inspect_pool_take(struct egress_worker *w, const char *sandbox, const char *name,
                             uint16_t port, bool check, uint64_t *slot);
void egress_inspect_pool_give(struct egress_worker *w, const char *sandbox, const char *name,
                              uint16_t port, int fd, uint64_t slot);
/* An event on the slot of a pooled socket (worker.c). */
void egress_inspect_pool_event(struct egress_worker *w, uint64_t slot);
/* Closes the idle upstreams (plain and TLS) of every sandbox that is no longer registered:
 * called by the worker after an unregister, once it closed the sandbox's connections. */
void egress_inspect_pool_purge_removed(struct egress_worker *w);

/* ---- sandboxes ---------------------------------------------------------------------------- */
struct egress_inspect_sandbox;
/* The sandbox's CA, TLS configuration and placeholders for policy p. */
int egress_inspect_sandbox_new(struct egress *e, const char *id, const struct egress_policy *p,
                               const json_t *keep_placeholders, struct egress_inspect_sandbox **out,
                               struct al_error *err);
void egress_inspect_sandbox_free(struct egress_inspect_sandbox *x);
/* A policy replaced (reload): placeholders follow it (existing ones keep their values); the
 * CA keeps the names it was created for. */
int egress_inspect_sandbox_policy(struct egress_sandbox *sb, const struct egress_policy *p,
                                  struct al_error *err);
/* {"caCertPem","caFingerprint","caNames":[...],"placeholders":{ENV: value}} */
json_t *egress_inspect_sandbox_json(struct egress_sandbox *sb);

/* ---- connections ---------------------------------------------------------------------------- */
/* Starts the session on a TLS connection decided INSPECT (c->host, the ClientHello in c->in,
 * c->dialled checked). 0: c->state is CONN_INSPECT; < 0: refused (a TLS alert was sent,
 * *reason says why: "outside_ca_constraints", "memory_budget", "interception_unavailable");
 * the caller audits the denial and closes. */
int egress_inspect_conn_start(struct egress_conn *c, const char **reason);
/* Plain HTTP handed over at a request whose rule injects: prefix holds that request (its
 * head re-serialised, then the bytes not yet parsed); c->dialled checked for the host. */
int egress_inspect_conn_start_plain(struct egress_conn *c, const char *host, const void *prefix,
                                    size_t prefix_len, const char **reason);
void egress_inspect_on_events(struct egress_conn *c, struct egress_end *end, int uv_events);
void egress_inspect_on_timeout(struct egress_conn *c);
/* From egress_conn_close, before the end is audited: ends the session (a TLS alert if it was
 * still going) and copies its byte counts into the connection. */
void egress_inspect_conn_stop(struct egress_conn *c);
/* From egress_conn_close, before the sockets close: frees the session (an upstream it keeps
 * goes back to the worker's pool). The why/detail texts it left stay valid until then. */
void egress_inspect_conn_free(struct egress_conn *c);
/* Whether the rule named (of p) injects credentials (also for a report-mode allow, where the
 * sandbox's copies must still go). */
bool egress_inspect_rule_injects(const struct egress_policy *p, const char *rule);
/* Whether injection can work at all (the vault client exists). */
bool egress_inspect_available(const struct egress *e);

#endif
