/* controlplane/cluster_tls: mutual TLS between gateways and nodes (cluster.tls,
 * docs/cluster.md "Mutual TLS"), on common/http_tls's mbedtls providers.
 *
 * Owns: the cluster's two TLS providers (from cluster.tls.ca_file, cert_file and key_file),
 * a node's TLS front and a gateway's connectors, and the connections between them.
 *   - A node's API port is a TLS front: each connection's handshake asks for a client
 *     certificate of the cluster CA (extendedKeyUsage clientAuth: a gateway's), then its
 *     plaintext reaches the API server through a socketpair (al_http_server_serve_fd_peer)
 *     with what the certificate proved in the request's peer (cp_cluster_node_admit decides:
 *     a client without a gateway's certificate gets a 403 saying why, /health and /metrics
 *     excepted). The front is not an HTTP parser: upgrades and streams pass as bytes.
 *   - A gateway reaches a node through a connector of its own: a unix socket per node (in
 *     <state>/run/cluster-tls/, mode 0600) whose connections it carries to the node over
 *     TLS, verifying the node's certificate against the cluster CA, for serverAuth, naming
 *     the node id the gateway expects. The HTTP client and forwarder, its pool and its
 *     upgrades, see only a unix target (cp_cluster_tls_target). A node that cannot be
 *     reached or proved gets the gateway's HTTP client a 502 naming the node and why.
 * Once a connection's handshake is complete its bytes move through common/relay, the TLS
 * session as the transport of its ciphertext side; a connection half closed for 30 s is
 * closed (its peer died). Everything runs on the loop.
 */
#ifndef AIRLOCK_CP_CLUSTER_TLS_H
#define AIRLOCK_CP_CLUSTER_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

struct cp;

/* A target cp_cluster_tls_target writes: "unix:" and a socket path, or a node's address. */
#define CP_CLUSTER_TARGET_MAX 300

/* Loads cluster.tls (no-op without it): 0, or a negative errno with err saying which file
 * and why. Before the API listens. */
int cp_cluster_tls_open(struct cp *cp, struct al_error *err);
/* cluster.tls is configured (and loaded). */
bool cp_cluster_tls_on(const struct cp *cp);
/* A node: the TLS front on host:port in front of cp->api; *bound is the port it got. */
int cp_cluster_tls_listen(struct cp *cp, const char *host, int port, int *bound,
                          struct al_error *err);
/* A gateway: the HTTP client target that reaches node_id at address (its connector's unix
 * socket, made at first use, the address updated when the node moved). Without cluster.tls:
 * the address itself. 0 or a negative errno (logged). */
int cp_cluster_tls_target(struct cp *cp, const char *node_id, const char *address, char *out,
                          size_t len);
/* Stops listening and closes every connection; the memory goes once the handles closed. */
void cp_cluster_tls_close(struct cp *cp);

#endif
