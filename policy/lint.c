/* policy/lint: warnings for policies that are valid but risky, and the public suffix list.
 *
 * Warnings (a policy with warnings still loads; `airlock policy lint` prints them):
 *   shadowed          a rule (or one of its hosts) can never match: an earlier rule without
 *                     method/path conditions matches everything it would, on the same
 *                     scheme and ports;
 *   broad_wildcard    a wildcard over a shared-hosting suffix of the Public Suffix List's
 *                     private section (github.io, herokuapp.com, s3.amazonaws.com, ...) or
 *                     over a large provider's domain (the list below);
 *   exfil_domain      a known tunnel, paste, file-drop, request-capture, out-of-band or
 *                     open-proxy service (the list below; docs/policy.md repeats it);
 *   internal_cidr     a CIDR that opens internal or special addresses (allowed, on purpose,
 *                     but said out loud), and the cloud metadata address in particular;
 *   passthrough_wildcard  a wildcard host on an allow rule with TLS passthrough: the proxy
 *                     sees only the SNI, and a front serving many names (a CDN) reaches any
 *                     of them through an allowed SNI with another Host (domain fronting).
 */
#include "policy/internal.h"

#include <libpsl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- public suffix list --------------------------------------------------------------- */

static const psl_ctx_t *lint__psl;
static pthread_once_t lint__psl_once = PTHREAD_ONCE_INIT;

static void lint__psl_load(void)
{
    /* The newest of the compiled-in list and the system's (Debian's publicsuffix). */
    const psl_ctx_t *c = psl_latest(NULL);
    lint__psl = c ? c : psl_builtin();
}

bool policy__is_public_suffix(const char *name, bool icann_only)
{
    pthread_once(&lint__psl_once, lint__psl_load);
    if (!lint__psl)
        return !strchr(name, '.'); /* no list at all: at least refuse bare TLDs */
    int type = icann_only ? PSL_TYPE_ICANN : (PSL_TYPE_PRIVATE | PSL_TYPE_NO_STAR_RULE);
    return psl_is_public_suffix2(lint__psl, name, type) != 0;
}

/* ---- lists ---------------------------------------------------------------------------- */

struct lint__domain {
    const char *domain;
    const char *what;
};

/* Services that move data out of an organisation's control by design. A host equal to or
 * under one of these gets a warning. Keep in sync with docs/policy.md. */
static const struct lint__domain lint__exfil[] = {
    /* tunnels to a machine outside */
    {"ngrok.io", "tunnel"},
    {"ngrok.app", "tunnel"},
    {"ngrok-free.app", "tunnel"},
    {"ngrok.dev", "tunnel"},
    {"ngrok-free.dev", "tunnel"},
    {"trycloudflare.com", "tunnel"},
    {"loca.lt", "tunnel"},
    {"localtunnel.me", "tunnel"},
    {"serveo.net", "tunnel"},
    {"serveousercontent.com", "tunnel"},
    {"localhost.run", "tunnel"},
    {"lhr.life", "tunnel"},
    {"pagekite.me", "tunnel"},
    {"tunnelto.dev", "tunnel"},
    {"bore.pub", "tunnel"},
    {"loclx.io", "tunnel"},
    {"localxpose.io", "tunnel"},
    {"pinggy.io", "tunnel"},
    {"pinggy.link", "tunnel"},
    {"zrok.io", "tunnel"},
    {"devtunnels.ms", "tunnel"},
    {"tunnelmole.net", "tunnel"},
    {"playit.gg", "tunnel"},
    {"sharedwithexpose.com", "tunnel"},
    /* paste sites */
    {"pastebin.com", "paste site"},
    {"paste.ee", "paste site"},
    {"hastebin.com", "paste site"},
    {"dpaste.org", "paste site"},
    {"dpaste.com", "paste site"},
    {"ghostbin.com", "paste site"},
    {"rentry.co", "paste site"},
    {"rentry.org", "paste site"},
    {"paste.rs", "paste site"},
    {"termbin.com", "paste site"},
    {"ix.io", "paste site"},
    {"sprunge.us", "paste site"},
    {"controlc.com", "paste site"},
    {"privatebin.net", "paste site"},
    {"justpaste.it", "paste site"},
    {"pastes.dev", "paste site"},
    /* file drops */
    {"transfer.sh", "file drop"},
    {"file.io", "file drop"},
    {"0x0.st", "file drop"},
    {"temp.sh", "file drop"},
    {"tmpfiles.org", "file drop"},
    {"catbox.moe", "file drop"},
    {"gofile.io", "file drop"},
    {"wetransfer.com", "file drop"},
    {"we.tl", "file drop"},
    {"anonfiles.com", "file drop"},
    {"bashupload.com", "file drop"},
    {"oshi.at", "file drop"},
    {"uguu.se", "file drop"},
    {"filebin.net", "file drop"},
    {"keep.sh", "file drop"},
    /* request capture */
    {"webhook.site", "request capture"},
    {"requestbin.com", "request capture"},
    {"requestbin.net", "request capture"},
    {"pipedream.net", "request capture"},
    {"hookbin.com", "request capture"},
    {"beeceptor.com", "request capture"},
    {"requestcatcher.com", "request capture"},
    {"mockbin.org", "request capture"},
    {"postb.in", "request capture"},
    {"smee.io", "request capture"},
    {"ptsv2.com", "request capture"},
    {"ptsv3.com", "request capture"},
    /* out-of-band interaction (security testing, exfiltration over DNS/HTTP) */
    {"interact.sh", "out-of-band interaction"},
    {"interactsh.com", "out-of-band interaction"},
    {"oast.pro", "out-of-band interaction"},
    {"oast.live", "out-of-band interaction"},
    {"oast.site", "out-of-band interaction"},
    {"oast.online", "out-of-band interaction"},
    {"oast.fun", "out-of-band interaction"},
    {"oast.me", "out-of-band interaction"},
    {"burpcollaborator.net", "out-of-band interaction"},
    {"oastify.com", "out-of-band interaction"},
    {"canarytokens.com", "out-of-band interaction"},
    {"canarytokens.org", "out-of-band interaction"},
    {"dnslog.cn", "out-of-band interaction"},
    {"ceye.io", "out-of-band interaction"},
    {"requestrepo.com", "out-of-band interaction"},
    {"xss.ht", "out-of-band interaction"},
    {"bxss.me", "out-of-band interaction"},
    /* open proxies and relays */
    {"corsproxy.io", "open proxy"},
    {"cors-anywhere.herokuapp.com", "open proxy"},
    {"allorigins.win", "open proxy"},
    {"thingproxy.freeboard.io", "open proxy"},
    {"cors.sh", "open proxy"},
};

/* Domains under which anyone can obtain a host name (cloud storage, app hosting, CDNs). A
 * wildcard at or under one of them matches endpoints an attacker can own. */
static const char *const lint__providers[] = {"amazonaws.com",
                                              "cloudfront.net",
                                              "awsapps.com",
                                              "googleapis.com",
                                              "googleusercontent.com",
                                              "appspot.com",
                                              "run.app",
                                              "cloudfunctions.net",
                                              "firebaseapp.com",
                                              "firebaseio.com",
                                              "web.app",
                                              "azurewebsites.net",
                                              "windows.net",
                                              "azureedge.net",
                                              "azurefd.net",
                                              "trafficmanager.net",
                                              "cloudapp.net",
                                              "azure.com",
                                              "herokuapp.com",
                                              "github.io",
                                              "githubusercontent.com",
                                              "gitlab.io",
                                              "vercel.app",
                                              "now.sh",
                                              "netlify.app",
                                              "pages.dev",
                                              "workers.dev",
                                              "r2.dev",
                                              "r2.cloudflarestorage.com",
                                              "fly.dev",
                                              "onrender.com",
                                              "railway.app",
                                              "glitch.me",
                                              "repl.co",
                                              "replit.dev",
                                              "digitaloceanspaces.com",
                                              "ondigitalocean.app",
                                              "akamaihd.net",
                                              "akamaized.net",
                                              "fastly.net",
                                              "fastlylb.net",
                                              "b-cdn.net",
                                              "backblazeb2.com",
                                              "wasabisys.com",
                                              "blogspot.com",
                                              "wordpress.com",
                                              "surge.sh",
                                              "deno.dev",
                                              "supabase.co",
                                              NULL};

static bool lint__at_or_under(const char *name, const char *domain)
{
    size_t nl = strlen(name), dl = strlen(domain);
    if (nl == dl)
        return strcmp(name, domain) == 0;
    return nl > dl && name[nl - dl - 1] == '.' && strcmp(name + nl - dl, domain) == 0;
}

void policy__lint_host(const struct policy_pattern *pat, const struct al_yaml_node *node,
                       const char *rule, struct al_diags *d)
{
    for (size_t i = 0; i < sizeof lint__exfil / sizeof lint__exfil[0]; i++) {
        if (lint__at_or_under(pat->base, lint__exfil[i].domain)) {
            al_yaml_warning(d, node, "exfil_domain",
                            "%s: '%s' is a known %s service (%s): data sent there leaves your "
                            "control; remove it unless that is the point",
                            rule, pat->text, lint__exfil[i].what, lint__exfil[i].domain);
            break;
        }
    }
    if (pat->kind == POLICY_PATTERN_EXACT)
        return;
    if (policy__is_public_suffix(pat->base, false)) {
        al_yaml_warning(d, node, "broad_wildcard",
                        "%s: '%s' matches every customer site under the shared-hosting suffix "
                        "'%s' (Public Suffix List, private section); anyone can publish there, "
                        "so list the exact hosts you need",
                        rule, pat->text, pat->base);
        return;
    }
    for (size_t i = 0; lint__providers[i]; i++) {
        if (lint__at_or_under(pat->base, lint__providers[i])) {
            al_yaml_warning(d, node, "broad_wildcard",
                            "%s: '%s' is a very broad wildcard: anyone can get a host under %s "
                            "(a large provider's domain), including an attacker; list the exact "
                            "hosts you need",
                            rule, pat->text, lint__providers[i]);
            return;
        }
    }
}

void policy__lint_cidr(const struct policy__cidr *c, const struct al_yaml_node *node,
                       const char *rule, struct al_diags *d)
{
    bool metadata;
    const char *internal = policy__cidr_internal_overlap(c, &metadata);
    char buf[80];
    policy__cidr_format(c, buf, sizeof buf);
    if (metadata)
        al_yaml_warning(d, node, "internal_cidr",
                        "%s: %s includes the cloud metadata service (169.254.169.254 / "
                        "fd00:ec2::254), which hands out credentials; narrow the range",
                        rule, buf);
    if (internal)
        al_yaml_warning(d, node, "internal_cidr",
                        "%s: %s opens internal addresses (%s); that is what cidrs are for, "
                        "but make sure nothing else listens there",
                        rule, buf, internal);
}

/* ---- shadowed rules ------------------------------------------------------------------- */

static bool lint__ports_cover(const struct policy_rule *a, const struct policy_rule *b)
{
    for (size_t i = 0; i < b->n_ports; i++) {
        bool in = false;
        for (size_t j = 0; j < a->n_ports && !in; j++)
            in = a->ports[j].lo <= b->ports[i].lo && a->ports[j].hi >= b->ports[i].hi;
        if (!in)
            return false;
    }
    return true;
}

/* Does rule a (earlier) take every request rule b would, for the part being checked? */
static bool lint__rule_covers(const struct policy__rule *a, const struct policy__rule *b)
{
    if (a->pub.index >= b->pub.index || a->conditional)
        return false;
    if (a->pub.scheme != b->pub.scheme && a->pub.scheme != POLICY_SCHEME_TCP)
        return false;
    return lint__ports_cover(&a->pub, &b->pub);
}

struct lint__shadow {
    const struct policy *p;
    const struct policy__rule *b;
    const struct policy__rule *by; /* earliest covering rule */
};

static int lint__shadow_exact(void *ctx, uint32_t ri)
{
    struct lint__shadow *s = ctx;
    const struct policy__rule *a = &s->p->rules[ri];
    if (ri >= s->b->pub.index)
        return 1; /* ascending: nothing earlier remains */
    if (lint__rule_covers(a, s->b)) {
        s->by = a;
        return 1;
    }
    return 0;
}

static void lint__shadow_wild(void *ctx, uint32_t ri)
{
    struct lint__shadow *s = ctx;
    const struct policy__rule *a = &s->p->rules[ri];
    if (lint__rule_covers(a, s->b) && (!s->by || a->pub.index < s->by->pub.index))
        s->by = a;
}

static void lint__shadowed(const struct policy *p, struct al_diags *d)
{
    for (size_t bi = 1; bi < p->n_rules; bi++) {
        const struct policy__rule *b = &p->rules[bi];
        size_t n = b->pub.n_hosts + b->pub.n_cidrs, shadowed = 0;
        const struct policy__rule *first_by = NULL;
        const struct policy__rule **by = calloc(n ? n : 1, sizeof *by);
        if (!by)
            return;
        for (size_t i = 0; i < b->pub.n_hosts; i++) {
            struct lint__shadow s = {p, b, NULL};
            const struct policy_pattern *pat = &b->patterns[i];
            if (pat->kind == POLICY_PATTERN_EXACT)
                policy__for_each_name_match(p, pat->base, strlen(pat->base), lint__shadow_exact,
                                            &s);
            else
                policy__for_each_wild_cover(p, pat, lint__shadow_wild, &s);
            by[i] = s.by;
        }
        for (size_t i = 0; i < b->pub.n_cidrs; i++) {
            const struct policy__cidr *c = &b->cidrs[i];
            for (uint32_t k = 0; k < p->m.n_cidr_rules && !by[i]; k++) {
                const struct policy__rule *a = &p->rules[p->m.cidr_rules[k]];
                if (a->pub.index >= b->pub.index)
                    break;
                if (!lint__rule_covers(a, b))
                    continue;
                for (size_t j = 0; j < a->pub.n_cidrs && !by[i]; j++)
                    if (a->cidrs[j].bits <= c->bits && policy__cidr_contains(&a->cidrs[j], &c->net))
                        by[i] = a;
            }
        }
        for (size_t i = 0; i < n; i++) {
            if (by[i]) {
                shadowed++;
                if (!first_by || by[i]->pub.index < first_by->pub.index)
                    first_by = by[i];
            }
        }
        const char *file = p->file;
        if (n && shadowed == n) {
            al_diags_add(d, AL_DIAG_WARNING, file, b->pub.line, b->col, "shadowed",
                         "rule '%s' can never match: rule '%s' (line %u) comes first and "
                         "matches everything it would (first match wins); remove it or move it "
                         "up",
                         b->pub.name, first_by->pub.name, first_by->pub.line);
        } else {
            for (size_t i = 0; i < n; i++) {
                if (!by[i])
                    continue;
                const char *what = i < b->pub.n_hosts ? b->pub.hosts[i] : b->pub.cidrs[i];
                al_diags_add(d, AL_DIAG_WARNING, file, b->host_lines[i], b->host_cols[i],
                             "shadowed",
                             "'%s' in rule '%s' is already matched by rule '%s' (line %u), which "
                             "comes first; this entry has no effect",
                             what, b->pub.name, by[i]->pub.name, by[i]->pub.line);
            }
        }
        free(by);
    }
}

/* Passthrough decides on the SNI alone; the Host inside the stream is never seen. Under a
 * wildcard, names are usually served by a shared front (a CDN, a cloud load balancer) that
 * routes on Host: a sandbox may send an allowed SNI and reach any site behind that front. */
static void lint__passthrough_wildcards(const struct policy *p, struct al_diags *d)
{
    for (size_t r = 0; r < p->n_rules; r++) {
        const struct policy__rule *b = &p->rules[r];
        if (b->pub.action != POLICY_ACTION_ALLOW || b->pub.scheme != POLICY_SCHEME_HTTPS ||
            b->pub.tls != POLICY_TLS_PASSTHROUGH)
            continue;
        for (size_t i = 0; i < b->pub.n_hosts; i++) {
            if (b->patterns[i].kind == POLICY_PATTERN_EXACT)
                continue;
            al_diags_add(d, AL_DIAG_WARNING, p->file, b->host_lines[i], b->host_cols[i],
                         "passthrough_wildcard",
                         "rule '%s': '%s' with TLS passthrough is decided on the SNI alone: "
                         "names under a wildcard are often served by one front (a CDN) that "
                         "routes on the Host inside TLS, which the proxy does not see, so an "
                         "allowed SNI can carry a request for any site behind it (domain "
                         "fronting); where that matters use tls: inspect (the proxy then checks "
                         "Host against the SNI) or list the exact hosts",
                         b->pub.name, b->pub.hosts[i]);
        }
    }
}

/* API-given transforms toward a wildcard: whoever calls the API may send a credential to
 * every name under it, including ones registered later by someone else. */
static void lint__transform_wildcards(const struct policy *p, struct al_diags *d)
{
    for (size_t r = 0; r < p->n_rules; r++) {
        const struct policy__rule *b = &p->rules[r];
        if (!b->pub.api_transforms)
            continue;
        for (size_t i = 0; i < b->pub.n_hosts; i++) {
            if (b->patterns[i].kind == POLICY_PATTERN_EXACT)
                continue;
            al_diags_add(d, AL_DIAG_WARNING, p->file, b->host_lines[i], b->host_cols[i],
                         "api_transforms_wildcard",
                         "rule '%s': api_transforms: allow on '%s' lets whoever calls the API "
                         "send headers (credentials) to every name under it; list the exact "
                         "hosts that should receive them where you can",
                         b->pub.name, b->pub.hosts[i]);
        }
    }
}

void policy__lint(const struct policy *p, struct al_diags *d)
{
    lint__shadowed(p, d);
    lint__passthrough_wildcards(p, d);
    lint__transform_wildcards(p, d);
}
