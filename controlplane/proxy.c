/* controlplane/proxy: data-plane routing (E2B-PROTOCOL.md sections 1 and 9).
 *
 * Owns: recognising sandbox traffic (E2b-Sandbox-Id, else a getHost Host
 * "<port>-<id>.<domain>", else X-Access-Token for what older SDKs send without sandbox
 * headers, else a signed file URL), and the policy of forwarding it to the sandbox's agent
 * over its unix-socket channel (never over the sandbox network). The forwarding itself is
 * common/http_forward's (method, target, Host, end-to-end headers and body unchanged,
 * streamed both ways with flow control, upgrades relayed as raw bytes once the agent answers
 * 101, a response cut short (al_http_resp_abort) when the agent fails after it started, so a
 * truncated download fails in the client instead of passing for a complete one).
 * Set-Cookie fields from a sandbox lose their Domain attributes (cp_proxy_cookie_host_only):
 * every sandbox's origins share api.domain, so a Domain cookie would reach the others'; the
 * console's session cookie (console.h) is never relayed at all, either way. The agent routes
 * on E2b-Sandbox-Port itself (49983 envd, 49999 code interpreter, any other port forwarded
 * to that port inside the sandbox).
 * "Sandbox gone" is E2B's own proxy's answer, 502 {"sandboxId","message":"The sandbox was
 * not found","code":502}; the SDKs turn it into the right error (TimeoutError whose message
 * is that text, SandboxNotFoundError for streams, isRunning() == false). Waking a paused
 * sandbox (autoResume) without its credentials is E2B's 403.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

#include "common/http_forward.h"
#include "common/log.h"
#include "console.h"
#include "cp.h"
#include "metrics.h"

#define PX_TIMEOUT_MS 120000

/* One request forwarded to a sandbox's agent (common/http_forward.h does the forwarding;
 * this is its policy's state). */
struct px {
    struct cp *cp;
    struct cp_sandbox *sb;
    bool by_host;    /* routed by a "<port>-<id>" Host: the sandbox headers are ours */
    bool api_origin; /* answered on airlockd's own host (not a "<port>-<id>" one) */
    char sid[64];
};

/* ---- signed file URLs ------------------------------------------------------------------- */

struct px_sig_find {
    const char *sig, *path, *user, *op, *exp;
    struct cp_sandbox *found;
};

static int px__sig_try(void *v, void *arg)
{
    struct cp_sandbox *sb = v;
    struct px_sig_find *f = arg;
    if (sb->rec.state != CP_SB_RUNNING && sb->rec.state != CP_SB_PAUSED)
        return 0;
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    const char *parts[] = {f->path, ":", f->op, ":", f->user, ":", sb->rec.token};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        crypto_hash_sha256_update(&st, (const unsigned char *)parts[i], strlen(parts[i]));
    if (f->exp) {
        crypto_hash_sha256_update(&st, (const unsigned char *)":", 1);
        crypto_hash_sha256_update(&st, (const unsigned char *)f->exp, strlen(f->exp));
    }
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&st, h);
    char b64[sodium_base64_ENCODED_LEN(crypto_hash_sha256_BYTES, sodium_base64_VARIANT_ORIGINAL)];
    sodium_bin2base64(b64, sizeof b64, h, sizeof h, sodium_base64_VARIANT_ORIGINAL);
    size_t n = strlen(b64);
    while (n && b64[n - 1] == '=')
        n--;
    b64[n] = '\0';
    if (cp_secret_equal(f->sig, strlen(f->sig), b64, n)) {
        f->found = sb;
        return 1;
    }
    return 0;
}

/* ---- the agent's answer ------------------------------------------------------------- */

/* A Set-Cookie value's Domain attributes; its first segment is the cookie's pair (a cookie
 * named Domain keeps its name). */
static bool px__domain_attr(const struct al_http_cookie_seg *seg, void *arg)
{
    (void)arg;
    return seg->index > 0 && seg->name_len == 6 && strncasecmp(seg->name, "domain", 6) == 0;
}

bool cp_proxy_cookie_host_only(const char *in, char *out, size_t outlen)
{
    return al_http_cookie_filter(in, out, outlen, px__domain_attr, NULL) != 0;
}

/* Whether a Set-Cookie value names the console's session cookie (console.h), in any case. */
static bool px__console_cookie(const char *v)
{
    struct al_http_cookie_seg seg = {0};
    return al_http_cookie_next(v, &seg) && cp_console_cookie_is_ours(&seg, true);
}

/* A field of the sandbox's response head (http_forward.h's response_field): a Set-Cookie is
 * made host-only, in a copy the forwarder frees, or dropped if it is the console's session
 * cookie (a sandbox answering on airlockd's own host, through a signed file URL or an access
 * token, must not plant one there); Date and Server are airlockd's own. */
static int px__response_field(void *arg, bool upgrade, const char *name, const char **value,
                              char **owned)
{
    const struct px *p = arg;
    if (!upgrade && (strcasecmp(name, "Date") == 0 || strcasecmp(name, "Server") == 0))
        return 1;
    if (strcasecmp(name, "Set-Cookie") != 0)
        return 0;
    if (px__console_cookie(*value)) {
        al_info("sandbox %s: a Set-Cookie of the console's session cookie was dropped", p->sid);
        return 1;
    }
    size_t len = strlen(*value) + 1;
    char *v = malloc(len);
    if (!v) {
        al_warn("sandbox %s: out of memory relaying its response", p->sid);
        return -ENOMEM;
    }
    if (cp_proxy_cookie_host_only(*value, v, len))
        al_debug("sandbox %s: a Set-Cookie lost its Domain attribute (host-only)", p->sid);
    *owned = v;
    *value = v;
    return 0;
}

/* A field of the client's request head (http_forward.h's request_field). */
static int px__request_field(void *arg, const char *name, const char **value, char **owned)
{
    const struct px *p = arg;
    /* The console's session is airlockd's, never the sandbox's to see. */
    if (strcasecmp(name, "Cookie") == 0) {
        size_t len = strlen(*value) + 1;
        char *c = malloc(len);
        if (!c)
            return -ENOMEM;
        *owned = c;
        if (cp_console_cookie_strip(*value, c, len)) {
            *value = c;
            return c[0] ? 0 : 1;
        }
    }
    /* Routed by Host: the sandbox headers say what the Host said, nothing else. */
    if (p->by_host &&
        (strcasecmp(name, "E2b-Sandbox-Id") == 0 || strcasecmp(name, "E2b-Sandbox-Port") == 0))
        return 1;
    return 0;
}

static int px__fail(void *arg, const struct al_http_req *req, int err, const char *why, char *msg,
                    size_t len)
{
    const struct px *p = arg;
    (void)err;
    al_info("sandbox %s: request %s %.120s to its agent failed: %s", p->sid, req->method, req->path,
            why);
    snprintf(msg, len, "sandbox %s is not reachable: %s", p->sid, why);
    return 502;
}

static void px__reply(void *arg, struct al_http_req *req, int status, const char *msg)
{
    (void)arg;
    cp_rest_error(req, status, "%s", msg);
}

static void px__end(void *arg, int status)
{
    struct px *p = arg;
    if (status)
        cp_metrics_proxy(p->cp->metrics, status);
    cp_sb_unref(p->sb);
    free(p);
}

void cp_proxy(struct cp *cp, struct cp_sandbox *sb, struct al_http_req *req, const char *port)
{
    if (strlen(sb->agent_sock) == 0) {
        cp_rest_error(req, 502, "sandbox %s has no agent channel", sb->rec.id);
        return;
    }
    struct px *p = calloc(1, sizeof *p);
    if (!p) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    p->cp = cp;
    p->sb = sb;
    p->by_host = port != NULL;
    p->api_origin = port == NULL;
    snprintf(p->sid, sizeof p->sid, "%s", sb->rec.id);
    char target[128], label[80];
    snprintf(target, sizeof target, "unix:%s", sb->agent_sock);
    snprintf(label, sizeof label, "sandbox %s", sb->rec.id);
    const char *targets[] = {target};
    const struct al_http_header routing[] = {{"E2b-Sandbox-Id", sb->rec.id},
                                             {"E2b-Sandbox-Port", port ? port : ""}};
    /* What a sandbox answers on airlockd's own origin (a signed file URL opened in a browser)
     * is the sandbox's content on the console's origin: CSP "sandbox" gives it an opaque
     * origin of its own, so its script can reach neither the console nor its session. */
    static const struct al_http_header csp = {"Content-Security-Policy", "sandbox"};
    struct al_http_forward_opts o = {
        .targets = targets,
        .n_targets = 1,
        .request_field = px__request_field,
        .request_extra = routing,
        .n_request_extra = port ? 2 : 0,
        .response_field = px__response_field,
        .response_extra = &csp,
        .n_response_extra = p->api_origin ? 1 : 0,
        .timeout_ms = PX_TIMEOUT_MS,
        .pool = cp->pool,
        .fail = px__fail,
        .reply = px__reply,
        .on_end = px__end,
        .arg = p,
        .label = label,
    };
    cp_sb_ref(sb);
    int rc = al_http_forward(cp->loop, req, &o);
    if (rc == 0)
        return;
    cp_sb_unref(sb);
    free(p);
    if (rc == -E2BIG) {
        cp_rest_error(req, 431, "too many request headers");
    } else if (rc == -ENOMEM) {
        cp_rest_error(req, 500, "out of memory");
    } else {
        cp_metrics_proxy(cp->metrics, 502);
        cp_rest_error(req, 502, "sandbox %s: cannot reach its agent: %s", sb->rec.id,
                      strerror(-rc));
    }
}

struct px_wake {
    struct al_http_req *req;
    char port[8];
};

static void px__resumed(struct cp_sandbox *sb, int rc, void *arg)
{
    struct px_wake *w = arg;
    if (rc || sb->rec.state != CP_SB_RUNNING) {
        cp_metrics_proxy(sb->cp->metrics, 502);
        cp_rest_error(w->req, 502, "sandbox %s could not be resumed for this request", sb->rec.id);
    } else {
        cp_proxy(sb->cp, sb, w->req, w->port[0] ? w->port : NULL);
    }
    free(w);
    cp_sb_unref(sb);
}

/* uploadUrl()/downloadUrl(): GET|POST /files?path=P[&username=U]&signature=v1_S
 * [&signature_expiration=E], with no sandbox header and no token: the signature is
 * base64(sha256("P:read|write:U:TOKEN[:E]")) without padding, so exactly one sandbox's token
 * produces it. Every running sandbox is tried, each comparison in constant time. */
static struct cp_sandbox *px__by_signature(struct cp *cp, const struct al_http_req *req)
{
    char sig[128], path[4096], user[256], exp[32];
    if (strcmp(req->path, "/files") != 0 ||
        al_http_query_get(req->query, "signature", sig, sizeof sig) != 0 ||
        strncmp(sig, "v1_", 3) != 0)
        return NULL;
    if (al_http_query_get(req->query, "path", path, sizeof path) != 0)
        path[0] = '\0';
    if (al_http_query_get(req->query, "username", user, sizeof user) != 0)
        user[0] = '\0';
    bool has_exp = al_http_query_get(req->query, "signature_expiration", exp, sizeof exp) == 0;
    const char *op = strcmp(req->method, "POST") == 0 ? "write" : "read";
    struct px_sig_find f = {
        .sig = sig + 3, .path = path, .user = user, .op = op, .exp = has_exp ? exp : NULL};
    cp_map_foreach(&cp->sandboxes, px__sig_try, &f);
    return f.found;
}

/* E2B's answer for traffic to a sandbox that does not exist (any more), the JSON its proxy
 * sends (shared/pkg/proxy/template/sandbox_not_found.go), for the id the request named. */
void cp_proxy_not_found(struct cp *cp, struct al_http_req *req, const char *id)
{
    cp_metrics_proxy(cp->metrics, 502);
    json_t *sid = json_stringn(id, strnlen(id, 64));
    json_t *b = json_object();
    json_object_set_new(b, "sandboxId", sid ? sid : json_string(""));
    json_object_set_new(b, "message", json_string("The sandbox was not found"));
    json_object_set_new(b, "code", json_integer(502));
    al_http_reply_json(req, 502, b);
}

bool cp_proxy_host_parse(const struct cp *cp, const struct al_http_req *req, char *port,
                         size_t portlen, char *id, size_t idlen)
{
    const char *dom = cp->cfg.domain;
    const char *host = al_http_req_header(req, "Host");
    if (!dom || !*dom || !host)
        return false;
    const char *dash = strchr(host, '-');
    const char *dot = dash ? strchr(dash, '.') : NULL;
    if (!dash || !dot || dash == host || (size_t)(dash - host) >= portlen || dot - dash - 1 <= 0 ||
        (size_t)(dot - dash - 1) >= idlen)
        return false;
    size_t dl = strlen(dom);
    const char *rest = dot + 1;
    const char *colon = strchr(rest, ':');
    size_t rl = colon ? (size_t)(colon - rest) : strlen(rest);
    if (rl != dl || strncasecmp(rest, dom, dl) != 0)
        return false;
    for (const char *c = host; c < dash; c++)
        if (*c < '0' || *c > '9')
            return false;
    memcpy(port, host, (size_t)(dash - host));
    port[dash - host] = '\0';
    memcpy(id, dash + 1, (size_t)(dot - dash - 1));
    id[dot - dash - 1] = '\0';
    return true;
}

/* getHost(port) URLs: "<port>-<sandbox id>.<api.domain>" (wildcard DNS to airlockd). *matched
 * says whether the Host had that form (id: the sandbox id it names), found or not. */
static struct cp_sandbox *px__by_host(struct cp *cp, const struct al_http_req *req, char *port,
                                      size_t portlen, char *id, bool *matched)
{
    *matched = cp_proxy_host_parse(cp, req, port, portlen, id, 64);
    return *matched && cp_sandbox_id_valid(id) ? cp_sandbox_get(cp, id) : NULL;
}

/* Paths of the control plane: never routed by access token. */
static bool px__control_path(const char *p)
{
    static const char *const cp_prefixes[] = {"/sandboxes", "/v1/",       "/v2/",     "/v3/",
                                              "/templates", "/snapshots", "/volumes", "/teams",
                                              "/secrets",   NULL};
    for (const char *const *c = cp_prefixes; *c; c++)
        if (strncmp(p, *c, strlen(*c)) == 0)
            return true;
    return false;
}

/* Whether a request holds a credential of sb: its envd access token (X-Access-Token) or its
 * traffic access token (E2B-Traffic-Access-Token), each given once. The agent checks them on
 * everything it serves; airlockd checks them itself before acting on a request's behalf
 * (waking a paused sandbox), so that knowing a sandbox id is not enough to wake it. */
static bool px__credential_ok(const struct cp_sandbox *sb, const struct al_http_req *req)
{
    size_t len = strlen(sb->rec.token);
    if (!len)
        return false;
    const char *xt = al_http_req_header(req, "X-Access-Token");
    if (xt && al_http_req_header_count(req, "X-Access-Token") == 1 && strlen(xt) == len &&
        sodium_memcmp(xt, sb->rec.token, len) == 0)
        return true;
    const char *tt = al_http_req_header(req, "E2B-Traffic-Access-Token");
    if (tt && al_http_req_header_count(req, "E2B-Traffic-Access-Token") == 1 &&
        strlen(tt) == AL_HTTP_TRAFFIC_TOKEN_LEN) {
        char want[AL_HTTP_TRAFFIC_TOKEN_LEN + 1];
        al_http_traffic_token(sb->rec.token, len, want);
        bool ok = sodium_memcmp(tt, want, AL_HTTP_TRAFFIC_TOKEN_LEN) == 0;
        sodium_memzero(want, sizeof want);
        return ok;
    }
    return false;
}

bool cp_proxy_route(struct cp *cp, struct al_http_req *req)
{
    bool credentialed = false; /* found by its token or a signature made with it */
    size_t nid = al_http_req_header_count(req, "E2b-Sandbox-Id");
    struct cp_sandbox *sb = NULL;
    char host_port[8] = "", host_id[64] = "";
    bool by_host = false, host_matched = false;
    if (nid > 1) {
        cp_rest_error(req, 400, "more than one E2b-Sandbox-Id header");
        return true;
    }
    if (nid == 1) {
        const char *id = al_http_req_header(req, "E2b-Sandbox-Id");
        if (cp_sandbox_id_valid(id))
            sb = cp_sandbox_get(cp, id);
        if (!sb || (sb->rec.state != CP_SB_RUNNING && sb->rec.state != CP_SB_PAUSED)) {
            cp_proxy_not_found(cp, req, id);
            return true;
        }
    } else if ((sb = px__by_host(cp, req, host_port, sizeof host_port, host_id, &host_matched))) {
        by_host = true;
    } else if (host_matched) {
        cp_proxy_not_found(cp, req, host_id);
        return true;
    } else if (!al_http_req_header(req, "X-Access-Token")) {
        /* A signed file URL is sandbox traffic too. */
        char sig[8];
        if (strcmp(req->path, "/files") != 0 ||
            al_http_query_get(req->query, "signature", sig, sizeof sig) == -ENOENT)
            return false;
        sb = px__by_signature(cp, req);
        credentialed = sb != NULL;
        if (!sb) {
            cp_metrics_proxy(cp->metrics, 502);
            cp_rest_error(req, 502, "no running sandbox matches this signed file URL");
            return true;
        }
    } else {
        const char *tok = al_http_req_header(req, "X-Access-Token");
        if (px__control_path(req->path) || al_http_req_header_count(req, "X-Access-Token") != 1)
            return false;
        sb = cp_sandbox_by_token(cp, tok, strlen(tok));
        credentialed = sb != NULL;
        if (!sb || (sb->rec.state != CP_SB_RUNNING && sb->rec.state != CP_SB_PAUSED)) {
            cp_metrics_proxy(cp->metrics, 502);
            cp_rest_error(req, 502, "no running sandbox has this access token");
            return true;
        }
    }
    if (by_host && sb->rec.state != CP_SB_RUNNING && sb->rec.state != CP_SB_PAUSED) {
        cp_proxy_not_found(cp, req, sb->rec.id);
        return true;
    }
    const char *port = by_host ? host_port : NULL;
    if (sb->rec.state == CP_SB_PAUSED) {
        if (sb->rec.auto_resume && !credentialed && !px__credential_ok(sb, req)) {
            cp_metrics_proxy(cp->metrics, 403);
            al_info("sandbox %s: not resumed for a request without its access token", sb->rec.id);
            cp_rest_error(req, 403,
                          "sandbox %s is paused; waking it (autoResume) needs its access token "
                          "(X-Access-Token) or its traffic access token "
                          "(E2B-Traffic-Access-Token)",
                          sb->rec.id);
            return true;
        }
        if (sb->rec.paused_fs) {
            /* E2B: a sandbox paused without its memory boots when it resumes, which traffic
             * never does for it, autoResume or not. */
            cp_metrics_proxy(cp->metrics, 502);
            cp_rest_error(req, 502,
                          "sandbox %s is paused without its memory: traffic does not resume it "
                          "(autoResume or not); resume it with Sandbox.connect, which boots it "
                          "again over its files",
                          sb->rec.id);
            return true;
        }
        if (sb->rec.auto_resume) {
            /* autoResume: traffic wakes the sandbox; the request goes on once it runs. Only
             * a request holding one of its credentials (checked above) may wake it. */
            struct px_wake *w = calloc(1, sizeof *w);
            if (!w) {
                cp_rest_error(req, 500, "out of memory");
                return true;
            }
            w->req = req;
            snprintf(w->port, sizeof w->port, "%s", port ? port : "");
            al_info("sandbox %s: resuming it for a request (autoResume)", sb->rec.id);
            cp_sb_ref(sb);
            cp_lifecycle_resume_then(sb, px__resumed, w);
            return true;
        }
        cp_metrics_proxy(cp->metrics, 502);
        cp_rest_error(req, 502, "sandbox %s is paused (resume it with Sandbox.connect)",
                      sb->rec.id);
        return true;
    }
    cp_proxy(cp, sb, req, port);
    return true;
}
