/* tests/unit/egress/intercept/test_session: the interception engine end to end on loopback: curl
 * and Python requests (OpenSSL, trusting the sandbox CA) -> icpt-proxy (the session engine) -> a
 * fake HTTPS upstream (fake_servers.py), with a fake vault on a unix socket. Checks what the
 * upstream received, what the client got back, and what was audited. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "al_test.h"

static const char TOKEN[] = "ghp_SessionTestToken_0123456789abcdefXYZ";

static const char POLICY[] = "version: 1\n"
                             "name: session-test\n"
                             "rules:\n"
                             "  - name: gh\n"
                             "    hosts: [api.github.test]\n"
                             "    methods: [GET, POST, HEAD]\n"
                             "    inject:\n"
                             "      - header: Authorization\n"
                             "        value: \"Bearer ${secret:github/token}\"\n"
                             "  - name: svc\n"
                             "    hosts: [svc.test]\n"
                             "    tls: inspect\n"
                             "    inject:\n"
                             "      - header: X-Api-Key\n"
                             "        placeholder: SERVICE_KEY\n"
                             "        secret: service/key\n"
                             "  - name: echo\n"
                             "    hosts: [echo.test]\n"
                             "    tls: inspect\n"
                             "  - name: plain\n"
                             "    hosts: [plain.test]\n"
                             "    scheme: http\n"
                             "    allow_plaintext_inject: true\n"
                             "    inject:\n"
                             "      - header: X-Token\n"
                             "        value: \"${secret:plain/token}\"\n"
                             "  - name: ws\n"
                             "    hosts: [ws.test]\n"
                             "    websocket: true\n"
                             "    scrub: best_effort\n"
                             "    inject:\n"
                             "      - header: Authorization\n"
                             "        value: \"Bearer ${secret:ws/token}\"\n";

struct world {
    char dir[256];
    pid_t up, vault, proxy;
    unsigned port;
    char name[64];
};

static struct world W;

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    ck_assert_msg(st == 0, "failed (%d): %s", st, cmd);
}

/* Output of a shell command (stdout+stderr). */
static int run(char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int run(char *out, size_t outlen, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void read_file(const char *name, char *out, size_t outlen)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", W.dir, name);
    FILE *f = fopen(p, "r");
    out[0] = 0;
    if (!f)
        return;
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = 0;
    fclose(f);
}

static pid_t spawn(const char *logname, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pid_t spawn(const char *logname, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char lp[512];
        snprintf(lp, sizeof lp, "%s/%s", W.dir, logname);
        int fd = open(lp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static unsigned wait_port(const char *file)
{
    char p[512], t[32];
    snprintf(p, sizeof p, "%s/%s", W.dir, file);
    for (int i = 0; i < 300; i++) {
        FILE *f = fopen(p, "r");
        if (f) {
            unsigned v = 0;
            if (fgets(t, sizeof t, f) && (v = (unsigned)atoi(t)) > 0) {
                fclose(f);
                return v;
            }
            fclose(f);
        }
        usleep(30000);
    }
    ck_abort_msg("%s did not appear", file);
    return 0;
}

/* Waits (30 s at most) until the log W.dir/name holds needle. */
static void wait_log(const char *name, const char *needle)
{
    static char buf[1 << 16];
    for (int i = 0; i < 1000; i++) {
        read_file(name, buf, sizeof buf);
        if (strstr(buf, needle))
            return;
        usleep(30000);
    }
    ck_abort_msg("%s has no \"%s\" after 30 s: %s", name, needle, buf);
}

static const char *bin_dir(void)
{
    const char *b = getenv("AIRLOCK_BINARY_DIR");
    static char out[512];
    snprintf(out, sizeof out, "%s/bin", b ? b : ".");
    return out;
}

static const char *script(void)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/tests/unit/egress/intercept/fake_servers.py", al_test_srcdir());
    return p;
}

/* Upstream PKI, fake vault and upstream, and a proxy for name. vault: start the fake vault. */
static bool plaintext_world;

static void world_start(const char *name, bool vault)
{
    memset(&W, 0, sizeof W);
    al_test_tmpdir(W.dir, sizeof W.dir, "icpt-sess");
    snprintf(W.name, sizeof W.name, "%s", name);
    sh("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "
       "ca.key -out roots.pem "
       "-days 2 -subj '/CN=airlock test upstream CA' >/dev/null 2>&1 && "
       "printf 'subjectAltName=DNS:api.github.test,DNS:svc.test,DNS:echo.test,DNS:ws.test\\n' > "
       "san.ext && "
       "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout up.key -out up.csr "
       "-subj '/CN=upstream' >/dev/null 2>&1 && openssl x509 -req -in up.csr -CA roots.pem -CAkey "
       "ca.key "
       "-CAcreateserial -out up.pem -days 2 -extfile san.ext >/dev/null 2>&1",
       W.dir);
    FILE *f;
    char pp[512];
    snprintf(pp, sizeof pp, "%s/policy.yaml", W.dir);
    ck_assert_ptr_nonnull(f = fopen(pp, "w"));
    fputs(POLICY, f);
    fclose(f);
    W.up = spawn("upstream.log",
                 "exec python3 %s upstream --port-file %s/up.port --cert %s/up.pem --key %s/up.key "
                 "--token %s %s",
                 script(), W.dir, W.dir, W.dir, TOKEN, plaintext_world ? "--plain" : "");
    unsigned up_port = wait_port("up.port");
    if (vault) {
        W.vault = spawn(
            "vault.log",
            "exec python3 %s vault --socket %s/vault.sock --secret github/token=%s@api.github.test "
            "--secret service/key=%s@svc.test --secret ws/token=%s@ws.test --secret "
            "plain/token=%s@plain.test",
            script(), W.dir, TOKEN, TOKEN, TOKEN, TOKEN);
        (void)0;
        char vs[512];
        snprintf(vs, sizeof vs, "%s/vault.sock", W.dir);
        for (int i = 0; i < 200 && access(vs, F_OK) != 0; i++)
            usleep(25000);
    }
    W.proxy =
        spawn("proxy.log",
              "exec %s/icpt-proxy --listen 127.0.0.1:0 --port-file %s/proxy.port --name %s "
              "--upstream 127.0.0.1:%u --upstream-ca %s/roots.pem --policy %s/policy.yaml "
              "--vault-socket %s/vault.sock --audit %s/audit.jsonl --ca-out %s/sandbox-ca.pem "
              "--placeholders-out %s/ph.json %s",
              bin_dir(), W.dir, name, up_port, W.dir, W.dir, W.dir, W.dir, W.dir, W.dir,
              plaintext_world ? "--plaintext" : "");
    W.port = wait_port("proxy.port");
    /* Until its changes feed is up the proxy refuses every fetch (vault_feed_down): wait for
     * the poll it sends only after it applied the vault's first answer. */
    if (vault)
        wait_log("vault.log", "wait_ms=");
}

static void stop(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
}

static void world_stop(void)
{
    stop(W.proxy);
    stop(W.up);
    stop(W.vault);
    /* The proxy (sanitized in the ASan build) stopped cleanly: no report, no leak. */
    static char log[1 << 16];
    read_file("proxy.log", log, sizeof log);
    ck_assert_msg(!strstr(log, "Sanitizer") && !strstr(log, "runtime error"), "proxy: %s", log);
    ck_assert_int_eq(al_test_rmtree(W.dir), 0);
}

/* curl through the proxy: returns the status; body in out; extra: curl options. */
static int curl(char *out, size_t outlen, const char *path, const char *extra)
{
    char status[16];
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "curl -sS --max-time 10 --cacert %s/sandbox-ca.pem --connect-to %s:443:127.0.0.1:%u "
             "-o %s/body "
             "-w '%%{http_code}' %s 'https://%s%s' 2>%s/curl.err",
             W.dir, W.name, W.port, W.dir, extra ? extra : "", W.name, path, W.dir);
    run(status, sizeof status, "%s", cmd);
    read_file("body", out, outlen);
    status[3] = 0; /* several URLs: the first status */
    return atoi(status);
}

static bool audit_has(const char *needle)
{
    static char a[1 << 20];
    for (int i = 0; i < 40; i++) {
        read_file("audit.jsonl", a, sizeof a);
        if (strstr(a, needle))
            return true;
        usleep(25000);
    }
    return false;
}

static void audit_never(const char *needle)
{
    static char a[1 << 20];
    read_file("audit.jsonl", a, sizeof a);
    ck_assert_msg(!strstr(a, needle), "the audit log contains '%s'", needle);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

START_TEST(inject_replaces_the_sandbox_header)
{
    world_start("api.github.test", true);
    static char body[65536], up[1 << 16];
    int st = curl(body, sizeof body, "/user",
                  "-H 'Authorization: Bearer sandbox-guess' -H 'Proxy-Authorization: Basic eDp5'");
    ck_assert_msg(st == 200, "status %d: %s", st, body);
    ck_assert_ptr_nonnull(strstr(body, "octocat"));
    read_file("upstream.log", up, sizeof up);
    ck_assert_ptr_nonnull(strstr(up, TOKEN));
    ck_assert_ptr_null(strstr(up, "sandbox-guess"));
    ck_assert_ptr_null(strstr(up, "Proxy-Authorization"));
    ck_assert_ptr_nonnull(strstr(up, "\"Accept-Encoding\": \"identity\""));
    /* The same with Python requests (another TLS stack's defaults): its connections go to
     * the proxy whatever the name resolves to. */
    char out[4096];
    run(out, sizeof out,
        "python3 - <<'EOF' 2>&1 | tail -1\n"
        "import requests, urllib3.util.connection as c\n"
        "orig = c.create_connection\n"
        "c.create_connection = lambda addr, *a, **k: orig(('127.0.0.1', %u), *a, **k)\n"
        "r = requests.get('https://api.github.test/user', verify='%s/sandbox-ca.pem', "
        "headers={'Authorization': 'x'})\n"
        "print(r.status_code, r.text)\n"
        "EOF",
        W.port, W.dir);
    ck_assert_msg(strstr(out, "200") && strstr(out, "octocat"), "python requests: %s", out);
    ck_assert(audit_has("\"outcome\":\"injected\""));
    ck_assert(audit_has("\"secret_id\":\"b2k:"));
    audit_never(TOKEN);
    world_stop();
}
END_TEST

START_TEST(reflection_is_scrubbed)
{
    world_start("api.github.test", true);
    static char body[1 << 16];
    const char *paths[] = {"/echo", "/echo-header", "/echo-b64", "/echo-gzip", "/echo-chunked"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        char dopt[600];
        snprintf(dopt, sizeof dopt, "-D %s/hdrs", W.dir);
        int st = curl(body, sizeof body, paths[i], i == 1 ? dopt : NULL);
        if (i == 1)
            read_file("hdrs", body, sizeof body);
        ck_assert_msg(st == 200, "%s: %d %s", paths[i], st, body);
        ck_assert_msg(!strstr(body, TOKEN), "%s leaked the token: %s", paths[i], body);
        ck_assert_msg(!strstr(body, "ghp_Session"), "%s leaked a piece: %s", paths[i], body);
        if (i == 1)
            ck_assert_msg(strstr(body, "X-Echo: Bearer REDACTED"), "%s", body);
        if (i == 2) {
            char dec[8192];
            run(dec, sizeof dec, "base64 -d < %s/body 2>/dev/null", W.dir);
            ck_assert_msg(!strstr(dec, TOKEN), "base64 echo decodes to the token: %s", dec);
        }
        if (i == 0 || i == 3 || i == 4)
            ck_assert_msg(strstr(body, "REDACTED"), "%s: %s", paths[i], body);
    }
    ck_assert(audit_has("\"event\":\"secret_reflected\""));
    ck_assert(audit_has("\"where\":\"response_headers\""));
    ck_assert(audit_has("\"decoded\":true"));
    audit_never(TOKEN);
    /* An encoding the proxy cannot read: strict scrubbing fails closed, readably. */
    int st = curl(body, sizeof body, "/echo-br", NULL);
    ck_assert_int_eq(st, 502);
    ck_assert_ptr_nonnull(strstr(body, "\"error\":\"response_not_inspectable\""));
    ck_assert_ptr_nonnull(strstr(body, "unsupported_content_encoding"));
    world_stop();
}
END_TEST

/* RFC 9110 7.6.1: a field the response's Connection names is for this hop only. */
START_TEST(response_connection_options_stay_behind)
{
    world_start("api.github.test", true);
    static char body[1 << 14];
    char dopt[600];
    snprintf(dopt, sizeof dopt, "-D %s/hdrs", W.dir);
    ck_assert_int_eq(curl(body, sizeof body, "/conn-named", dopt), 200);
    read_file("hdrs", body, sizeof body);
    ck_assert_msg(strcasestr(body, "X-Kept: 1"), "%s", body);
    ck_assert_msg(!strcasestr(body, "X-Hop"), "a Connection option was forwarded: %s", body);
    world_stop();
}
END_TEST

START_TEST(requests_decided_one_by_one)
{
    world_start("api.github.test", true);
    static char body[65536], up[1 << 16];
    int st = curl(body, sizeof body, "/user", "-X DELETE");
    ck_assert_int_eq(st, 403);
    ck_assert_ptr_nonnull(strstr(body, "\"error\":\"blocked_by_policy\""));
    ck_assert_ptr_nonnull(strstr(body, "\"reason\":\"method_not_allowed\""));
    ck_assert_ptr_nonnull(strstr(body, "\"rule\":\"gh\""));
    ck_assert_ptr_nonnull(strstr(body, "\"request_id\":\"icpt-"));
    st = curl(body, sizeof body, "/user", "-H 'Host: evil.test'");
    ck_assert_int_eq(st, 403);
    ck_assert_ptr_nonnull(strstr(body, "host_sni_mismatch"));
    st = curl(body, sizeof body, "/user",
              "--http1.1 -H 'Connection: Upgrade, HTTP2-Settings' -H 'Upgrade: h2c' -H "
              "'HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA'");
    ck_assert_int_eq(st, 403);
    ck_assert_ptr_nonnull(strstr(body, "h2c_upgrade_refused"));
    st = curl(body, sizeof body, "/user", "-H 'Upgrade: websocket' -H 'Connection: Upgrade'");
    ck_assert_int_eq(st, 403);
    ck_assert_ptr_nonnull(strstr(body, "websocket_not_allowed"));
    /* The proxy never follows a redirect: the 302 reaches the sandbox as it came. */
    char dopt[600];
    snprintf(dopt, sizeof dopt, "-D %s/hdrs", W.dir);
    st = curl(body, sizeof body, "/redirect", dopt);
    ck_assert_int_eq(st, 302);
    read_file("hdrs", body, sizeof body);
    ck_assert_ptr_nonnull(strstr(body, "Location: https://evil.test/steal"));
    read_file("upstream.log", up, sizeof up);
    ck_assert_int_eq(count(up, "\"path\": \"/redirect\""), 1);
    ck_assert_ptr_null(strstr(up, "/steal"));
    ck_assert_ptr_null(strstr(up, "\"method\": \"DELETE\"")); /* denials never reach it */
    ck_assert(audit_has("\"reason\":\"method_not_allowed\""));
    ck_assert(audit_has("\"reason\":\"h2c_upgrade_refused\""));
    world_stop();
}
END_TEST

START_TEST(keepalive_and_upstream_reuse)
{
    world_start("api.github.test", true);
    static char body[1 << 16];
    /* Two requests on one sandbox connection, then a new connection. */
    char url2[256];
    snprintf(url2, sizeof url2, "'https://api.github.test/big?n=3000000' -o %s/body2", W.dir);
    int st = curl(body, sizeof body, "/user", url2);
    ck_assert_int_eq(st, 200);
    /* curl pairs -o with URLs in order: body holds /big, body2 /user. */
    struct stat sb;
    char p1[512];
    snprintf(p1, sizeof p1, "%s/body", W.dir);
    ck_assert_int_eq(stat(p1, &sb), 0);
    ck_assert_int_eq(sb.st_size, 3000000);
    read_file("body2", body, sizeof body);
    ck_assert_ptr_nonnull(strstr(body, "octocat"));
    st = curl(body, sizeof body, "/user", NULL);
    ck_assert_int_eq(st, 200);
    ck_assert(audit_has("\"upstream_reused\":true"));
    world_stop();
}
END_TEST

START_TEST(placeholders)
{
    world_start("svc.test", true);
    static char body[65536], ph[512], up[1 << 16];
    read_file("ph.json", ph, sizeof ph);
    char *v = strstr(ph, "alph_");
    ck_assert_ptr_nonnull(v);
    char val[64];
    snprintf(val, 46, "%s", v);
    char hdr[256];
    snprintf(hdr, sizeof hdr, "-H 'X-Api-Key: %s'", val);
    int st = curl(body, sizeof body, "/svc", hdr);
    ck_assert_msg(st == 200, "%d %s", st, body);
    read_file("upstream.log", up, sizeof up);
    ck_assert_ptr_nonnull(strstr(up, TOKEN)); /* the upstream got the real key */
    ck_assert_ptr_null(strstr(up, val));      /* never the placeholder */
    /* Anywhere else: refused and audited. */
    char path[256];
    snprintf(path, sizeof path, "/svc?key=%s", val);
    st = curl(body, sizeof body, path, NULL);
    ck_assert_int_eq(st, 403);
    ck_assert_ptr_nonnull(strstr(body, "placeholder_misuse"));
    snprintf(hdr, sizeof hdr, "-X POST --data-binary 'token=%s&x=1'", val);
    st = curl(body, sizeof body, "/svc", hdr);
    ck_assert_int_eq(st, 403);
    ck_assert(audit_has("\"event\":\"placeholder_misuse\""));
    ck_assert(audit_has("\"where\":\"body\""));
    read_file("upstream.log", up, sizeof up);
    ck_assert_ptr_null(strstr(up, val));
    world_stop();
}
END_TEST

START_TEST(vault_unreachable_fails_closed)
{
    world_start("api.github.test", false);
    static char body[65536];
    int st = curl(body, sizeof body, "/user", NULL);
    ck_assert_int_eq(st, 503);
    ck_assert_ptr_nonnull(strstr(body, "credentials_unavailable"));
    ck_assert_ptr_nonnull(strstr(body, "vault_feed_down"));
    world_stop();
}
END_TEST

START_TEST(sandbox_without_the_ca)
{
    world_start("echo.test", true);
    char out[4096];
    int rc = run(
        out, sizeof out,
        "curl -sS --max-time 5 --connect-to echo.test:443:127.0.0.1:%u https://echo.test/echo 2>&1",
        W.port);
    ck_assert_int_ne(rc, 0);
    ck_assert(audit_has("sandbox_tls_failed"));
    ck_assert(audit_has("unknown_ca"));
    /* With the CA it works, and a rule without inject passes the sandbox's own header. */
    static char body[65536];
    int st = curl(body, sizeof body, "/echo", "-H 'Authorization: Bearer mine'");
    ck_assert_int_eq(st, 200);
    ck_assert_ptr_nonnull(strstr(body, "Bearer mine"));
    world_stop();
}
END_TEST

/* WebSocket on a rule that allows it: 101, then bytes both ways; what the upstream sends
 * back is still scrubbed (best_effort rule); the sandbox's close ends the tunnel. */
START_TEST(websocket_tunnel)
{
    world_start("ws.test", true);
    char out[8192];
    int rc = run(out, sizeof out,
                 "python3 - <<'EOF' 2>&1\n"
                 "import socket, ssl\n"
                 "ctx = ssl.create_default_context(cafile='%s/sandbox-ca.pem')\n"
                 "s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', %u), timeout=10), "
                 "server_hostname='ws.test')\n"
                 "s.sendall(b'GET /ws HTTP/1.1\\r\\nHost: ws.test\\r\\nUpgrade: "
                 "websocket\\r\\nConnection: Upgrade\\r\\n'\n"
                 "          b'Sec-WebSocket-Key: "
                 "dGhlIHNhbXBsZSBub25jZQ==\\r\\nSec-WebSocket-Version: 13\\r\\n\\r\\n')\n"
                 "head = b''\n"
                 "while b'\\r\\n\\r\\n' not in head:\n"
                 "    head += s.recv(1)\n"
                 "print(head.split(b'\\r\\n')[0].decode())\n"
                 "s.sendall(b'ping-1 %s tail')\n"
                 "got = b''\n"
                 "while len(got) < len(b'ping-1 %s tail'):\n"
                 "    got += s.recv(4096)\n"
                 "print('echo:', got.decode())\n"
                 "s.sendall(b'hold %.6s')\n"
                 "got = b''\n"
                 "while len(got) < 11:\n"
                 "    got += s.recv(4096)\n"
                 "print('held:', got.decode())\n"
                 "s.close()\n"
                 "EOF",
                 W.dir, W.port, TOKEN, TOKEN, TOKEN);
    ck_assert_msg(rc == 0, "%s", out);
    ck_assert_msg(strstr(out, "HTTP/1.1 101"), "%s", out);
    ck_assert_msg(strstr(out, "echo: ping-1 "), "%s", out);
    ck_assert_msg(!strstr(out + (strstr(out, "echo:") - out), TOKEN),
                  "the echoed token reached the sandbox: %s", out);
    ck_assert(audit_has("\"websocket\":true"));
    /* What could begin the secret is held back, and goes after a short quiet. */
    char held[32];
    snprintf(held, sizeof held, "held: hold %.6s", TOKEN);
    ck_assert_msg(strstr(out, held), "%s", out);
    if (!audit_has("\"end\":\"sandbox_closed\"")) {
        static char a[1 << 16];
        read_file("audit.jsonl", a, sizeof a);
        ck_abort_msg("no sandbox_closed end: %s", a);
    }
    world_stop();
}
END_TEST

/* Plain HTTP through the same engine, for a rule that allows plaintext injection. */
START_TEST(plaintext_inject)
{
    plaintext_world = true;
    world_start("plain.test", true);
    static char body[65536], up[1 << 16];
    char status[16];
    run(status, sizeof status,
        "curl -sS --max-time 10 --connect-to plain.test:80:127.0.0.1:%u -o %s/body -w "
        "'%%{http_code}' "
        "-H 'X-Token: sandbox-own' http://plain.test/plain",
        W.port, W.dir);
    read_file("body", body, sizeof body);
    ck_assert_msg(strcmp(status, "200") == 0, "%s %s", status, body);
    read_file("upstream.log", up, sizeof up);
    ck_assert_ptr_nonnull(strstr(up, TOKEN));
    ck_assert_ptr_null(strstr(up, "sandbox-own"));
    run(status, sizeof status,
        "curl -sS --max-time 10 --connect-to plain.test:80:127.0.0.1:%u -o %s/body -w "
        "'%%{http_code}' "
        "http://plain.test/echo",
        W.port, W.dir);
    read_file("body", body, sizeof body);
    ck_assert_str_eq(status, "200");
    ck_assert_msg(!strstr(body, TOKEN), "%s", body);
    /* The connection is bound to its host. */
    run(status, sizeof status,
        "curl -sS --max-time 10 --connect-to plain.test:80:127.0.0.1:%u -o %s/body -w "
        "'%%{http_code}' "
        "-H 'Host: other.test' http://plain.test/plain",
        W.port, W.dir);
    read_file("body", body, sizeof body);
    ck_assert_str_eq(status, "403");
    ck_assert_ptr_nonnull(strstr(body, "host_changed_on_connection"));
    ck_assert(audit_has("\"proto\":\"http\""));
    world_stop();
    plaintext_world = false;
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("intercept_session");
    TCase *tc = tcase_create("session");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, inject_replaces_the_sandbox_header);
    tcase_add_test(tc, reflection_is_scrubbed);
    tcase_add_test(tc, response_connection_options_stay_behind);
    tcase_add_test(tc, requests_decided_one_by_one);
    tcase_add_test(tc, keepalive_and_upstream_reuse);
    tcase_add_test(tc, placeholders);
    tcase_add_test(tc, vault_unreachable_fails_closed);
    tcase_add_test(tc, sandbox_without_the_ca);
    tcase_add_test(tc, websocket_tunnel);
    tcase_add_test(tc, plaintext_inject);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
