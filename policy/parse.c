/* policy/parse: policy YAML -> validated rules, with an error for everything that is wrong
 * (file:line:col, what, how to fix it) and warnings for what is legal but risky.
 * docs/policy.md is the reference for every key and every rule enforced here. */
#include "policy/internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

struct parse__ctx {
    struct policy *p;
    struct al_diags *d;
    char what[160]; /* "rule 'github-api'" for messages */
};

#define PERR(c, node, code, ...)  al_yaml_error((c)->d, (node), (code), __VA_ARGS__)
#define PWARN(c, node, code, ...) al_yaml_warning((c)->d, (node), (code), __VA_ARGS__)

static bool parse__ident_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || !isalnum((unsigned char)s[0]))
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.')
            return false;
    }
    return true;
}

/* ---- inject values -------------------------------------------------------------------- */

static bool parse__prefix_ci(const char *s, size_t len, const char *prefix)
{
    size_t pl = strlen(prefix);
    return len >= pl && strncmp(s, prefix, pl) == 0;
}

/* Does this literal text (outside ${secret:...}) look like a credential? Heuristics, on
 * purpose broad: vendors' token prefixes, long runs of token characters, and shorter runs
 * that mix letters and digits. */
static bool parse__looks_like_secret(const char *s, size_t len, size_t *at, size_t *run)
{
    static const char *const prefixes[] = {
        "ghp_",     "gho_",  "ghu_",       "ghs_",  "ghr_",   "github_pat_", "glpat-",
        "xoxb-",    "xoxp-", "xoxa-",      "xoxs-", "sk-",    "sk_live_",    "sk_test_",
        "rk_live_", "AKIA",  "ASIA",       "AIza",  "ya29.",  "eyJ",         "npm_",
        "pypi-",    "hf_",   "-----BEGIN", "SG.",   "shpat_", "dop_v1_",     NULL};
    for (size_t i = 0; i < len; i++) {
        if (i > 0 && (isalnum((unsigned char)s[i - 1])))
            continue; /* prefixes count at the start of a word */
        for (size_t k = 0; prefixes[k]; k++) {
            if (parse__prefix_ci(s + i, len - i, prefixes[k]) && len - i > strlen(prefixes[k])) {
                *at = i;
                *run = len - i;
                return true;
            }
        }
    }
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        bool alpha = false, digit = false;
        while (j < len && (isalnum((unsigned char)s[j]) || strchr("+/=_-.~", s[j]))) {
            alpha |= isalpha((unsigned char)s[j]) != 0;
            digit |= isdigit((unsigned char)s[j]) != 0;
            j++;
        }
        size_t r = j - i;
        if (r >= 20 || (r >= 12 && alpha && digit)) {
            *at = i;
            *run = r;
            return true;
        }
        i = j > i ? j : i + 1;
    }
    return false;
}

static const char *const parse__forbidden_headers[] = {"host",
                                                       "content-length",
                                                       "transfer-encoding",
                                                       "connection",
                                                       "upgrade",
                                                       "te",
                                                       "trailer",
                                                       "keep-alive",
                                                       "proxy-authorization",
                                                       "proxy-connection",
                                                       "proxy-authenticate",
                                                       "expect",
                                                       "http2-settings",
                                                       NULL};

bool policy_header_injectable(const char *h, size_t len)
{
    if (!policy__method_token_valid(h, len))
        return false;
    if (len > 6 && strncasecmp(h, "proxy-", 6) == 0)
        return false;
    for (size_t i = 0; parse__forbidden_headers[i]; i++)
        if (strlen(parse__forbidden_headers[i]) == len &&
            strncasecmp(h, parse__forbidden_headers[i], len) == 0)
            return false;
    return true;
}

static int parse__header_name(struct parse__ctx *c, const struct al_yaml_node *n, const char **out)
{
    const char *h;
    if (al_yaml_str(n, "inject header", &h, c->d))
        return -EINVAL;
    if (!policy__method_token_valid(h, strlen(h)))
        return PERR(c, n, "bad_header",
                    "%s: '%s' is not a valid HTTP header name (letters, digits and "
                    "!#$%%&'*+-.^_`|~ only)",
                    c->what, h);
    if (!policy_header_injectable(h, strlen(h)))
        return PERR(c, n, "bad_header",
                    "%s: the header '%s' cannot be injected: it frames or routes the "
                    "request and is controlled by the proxy",
                    c->what, h);
    *out = h;
    return 0;
}

static int parse__template(struct parse__ctx *c, const struct al_yaml_node *n,
                           struct policy_inject *inj, const char *header)
{
    const char *v = n->str;
    size_t len = n->len;
    struct policy_tmpl_part parts[64];
    const char *secrets[64];
    size_t np = 0, ns = 0;
    size_t i = 0, lit = 0;
    for (size_t k = 0; k < len; k++) {
        unsigned char ch = (unsigned char)v[k];
        if (ch < 0x20 || ch == 0x7f || ch >= 0x80)
            return PERR(c, n, "bad_inject_value",
                        "%s: the value for header '%s' contains a control or non-ASCII "
                        "character; header values must be printable ASCII",
                        c->what, header);
    }
    while (i <= len) {
        const char *ref = i < len ? strstr(v + i, "${") : NULL;
        size_t end = ref ? (size_t)(ref - v) : len;
        if (end > lit || (!ref && lit < len)) {
            if (np == 64)
                return PERR(c, n, "bad_inject_value", "%s: value is too complex", c->what);
            parts[np++] = (struct policy_tmpl_part){false, v + lit, end - lit};
        }
        if (!ref)
            break;
        const char *close = strchr(ref, '}');
        if (!close)
            return PERR(c, n, "bad_inject_value",
                        "%s: '${' without a closing '}' in the value for header '%s'", c->what,
                        header);
        if (strncmp(ref + 2, "secret:", 7) != 0)
            return PERR(c, n, "bad_inject_value",
                        "%s: unknown reference '%.*s' in the value for header '%s'; the only "
                        "reference is ${secret:NAME}",
                        c->what, (int)(close - ref + 1), ref, header);
        const char *name = ref + 9;
        size_t nl = (size_t)(close - name);
        if (!policy_secret_name_valid(name, nl))
            return PERR(c, n, "bad_secret_name",
                        "%s: '%.*s' is not a valid secret name: use segments of letters, "
                        "digits, '.', '_' and '-' joined by '/', e.g. github/token",
                        c->what, (int)nl, name);
        if (np == 64 || ns == 64)
            return PERR(c, n, "bad_inject_value", "%s: value is too complex", c->what);
        parts[np++] = (struct policy_tmpl_part){true, name, nl};
        bool seen = false;
        for (size_t s = 0; s < ns; s++)
            seen |= strlen(secrets[s]) == nl && memcmp(secrets[s], name, nl) == 0;
        if (!seen)
            secrets[ns++] = name;
        i = lit = (size_t)(close - v) + 1;
        if (i == len)
            break;
    }
    for (size_t k = 0; k < np; k++) {
        size_t at, run;
        if (!parts[k].secret && parse__looks_like_secret(parts[k].text, parts[k].len, &at, &run))
            return PERR(c, n, "literal_secret",
                        "%s: the value for header '%s' contains literal text that looks like a "
                        "credential (%zu characters at offset %zu of the value); put the "
                        "credential in the vault (`airlock vault put NAME`) and write "
                        "${secret:NAME} instead",
                        c->what, header, run, (size_t)(parts[k].text - v) + at);
    }
    if (ns == 0)
        return PERR(c, n, "literal_secret",
                    "%s: the value for header '%s' references no secret: injected values must "
                    "come from the vault; store the credential with `airlock vault put NAME` "
                    "and write \"...${secret:NAME}\"",
                    c->what, header);
    struct policy__arena *a = &c->p->arena;
    struct policy_tmpl_part *pv = policy__alloc(a, np * sizeof *pv);
    const char **sv = policy__alloc(a, ns * sizeof *sv);
    char *copy = policy__strndup(a, v, len);
    if (!pv || !sv || !copy)
        return -ENOMEM;
    for (size_t k = 0; k < np; k++) {
        pv[k] = parts[k];
        pv[k].text = copy + (parts[k].text - v);
    }
    for (size_t s = 0; s < ns; s++) {
        size_t nl = strcspn(secrets[s], "}");
        if (!(sv[s] = policy__strndup(a, secrets[s], nl)))
            return -ENOMEM;
    }
    inj->value = copy;
    inj->parts = pv;
    inj->n_parts = np;
    inj->secrets = sv;
    inj->n_secrets = ns;
    return 0;
}

static bool parse__env_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || !(isupper((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isupper((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '_')
            return false;
    return true;
}

static int parse__placeholder_add(struct parse__ctx *c, const struct al_yaml_node *n,
                                  const char *env, const char *secret)
{
    struct policy *p = c->p;
    for (size_t i = 0; i < p->n_placeholders; i++) {
        if (strcmp(p->placeholders[i].env, env) == 0) {
            if (strcmp(p->placeholders[i].secret, secret) != 0)
                return PERR(c, n, "placeholder_conflict",
                            "%s: placeholder %s stands for secret '%s' here but for '%s' in "
                            "another rule; one environment variable can stand for one secret",
                            c->what, env, secret, p->placeholders[i].secret);
            return 0;
        }
    }
    size_t cap = p->n_placeholders + 1;
    struct policy_placeholder *nv = policy__alloc(&p->arena, cap * sizeof *nv);
    if (!nv)
        return -ENOMEM;
    if (p->n_placeholders)
        memcpy(nv, p->placeholders, p->n_placeholders * sizeof *nv);
    nv[p->n_placeholders].env = policy__strdup(&p->arena, env);
    nv[p->n_placeholders].secret = policy__strdup(&p->arena, secret);
    p->placeholders = nv;
    p->n_placeholders = cap;
    return 0;
}

static int parse__inject(struct parse__ctx *c, const struct al_yaml_node *list,
                         struct policy__rule *r)
{
    if (list->kind != AL_YAML_SEQ)
        return PERR(c, list, "wrong_type",
                    "%s: inject must be a list of {header, value} entries, not %s", c->what,
                    al_yaml_describe(list));
    if (list->n == 0)
        return PERR(c, list, "empty_list", "%s: inject is empty: remove it or add entries",
                    c->what);
    struct policy_inject *v = policy__alloc(&c->p->arena, list->n * sizeof *v);
    if (!v)
        return -ENOMEM;
    static const char *const keys[] = {"header", "value", "placeholder", "secret", NULL};
    int rc = 0;
    for (size_t i = 0; i < list->n; i++) {
        const struct al_yaml_node *e = list->items[i];
        char what[200];
        snprintf(what, sizeof what, "an inject entry of %s", c->what);
        if (al_yaml_expect_map(e, what, keys, c->d)) {
            rc = -EINVAL;
            continue;
        }
        const struct al_yaml_node *hn = al_yaml_get(e, "header"), *vn = al_yaml_get(e, "value"),
                                  *pn = al_yaml_get(e, "placeholder"),
                                  *sn = al_yaml_get(e, "secret");
        const char *header = NULL;
        if (!hn) {
            rc = PERR(c, e, "missing_key", "%s: inject entry needs 'header'", c->what);
            continue;
        }
        if (parse__header_name(c, hn, &header)) {
            rc = -EINVAL;
            continue;
        }
        for (size_t j = 0; j < i; j++) {
            if (v[j].header && strcasecmp(v[j].header, header) == 0) {
                rc = PERR(c, hn, "duplicate_header",
                          "%s: header '%s' is injected twice; keep one entry", c->what, header);
                break;
            }
        }
        v[i].header = policy__strdup(&c->p->arena, header);
        if (pn) {
            const char *env, *secret;
            if (vn) {
                rc = PERR(c, vn, "inject_mode",
                          "%s: an inject entry has either 'value' (the proxy sets the header) "
                          "or 'placeholder' + 'secret' (the proxy swaps a placeholder), not "
                          "both",
                          c->what);
                continue;
            }
            if (al_yaml_str(pn, "placeholder", &env, c->d)) {
                rc = -EINVAL;
                continue;
            }
            if (!parse__env_name_valid(env)) {
                rc = PERR(c, pn, "bad_placeholder",
                          "%s: placeholder '%s' must be an environment variable name "
                          "(A-Z, 0-9, _; starting with a letter or _)",
                          c->what, env);
                continue;
            }
            if (!sn) {
                rc = PERR(c, e, "missing_key",
                          "%s: placeholder %s needs 'secret: NAME' (the vault secret it stands "
                          "for)",
                          c->what, env);
                continue;
            }
            if (al_yaml_str(sn, "secret", &secret, c->d)) {
                rc = -EINVAL;
                continue;
            }
            if (!policy_secret_name_valid(secret, strlen(secret))) {
                rc = PERR(c, sn, "bad_secret_name",
                          "%s: '%s' is not a valid secret name: use segments of letters, "
                          "digits, '.', '_' and '-' joined by '/', e.g. github/token",
                          c->what, secret);
                continue;
            }
            struct policy_tmpl_part *part = policy__alloc(&c->p->arena, sizeof *part);
            const char **sv = policy__alloc(&c->p->arena, sizeof *sv);
            if (!part || !sv)
                return -ENOMEM;
            sv[0] = policy__strdup(&c->p->arena, secret);
            *part = (struct policy_tmpl_part){true, sv[0], strlen(secret)};
            v[i].parts = part;
            v[i].n_parts = 1;
            v[i].secrets = sv;
            v[i].n_secrets = 1;
            v[i].placeholder_env = policy__strdup(&c->p->arena, env);
            if (parse__placeholder_add(c, pn, env, secret))
                rc = -EINVAL;
            continue;
        }
        if (sn) {
            rc = PERR(c, sn, "inject_mode",
                      "%s: 'secret' belongs to placeholder mode; to set the header write "
                      "value: \"...${secret:NAME}\"",
                      c->what);
            continue;
        }
        if (!vn) {
            rc = PERR(c, e, "missing_key",
                      "%s: inject entry for '%s' needs 'value' (e.g. \"Bearer ${secret:NAME}\")",
                      c->what, header);
            continue;
        }
        const char *val;
        if (al_yaml_str(vn, "inject value", &val, c->d)) {
            rc = -EINVAL;
            continue;
        }
        int trc = parse__template(c, vn, &v[i], header);
        if (trc == -ENOMEM)
            return trc;
        if (trc)
            rc = -EINVAL;
    }
    r->pub.inject = v;
    r->pub.n_inject = list->n;
    return rc;
}

/* ---- hosts, cidrs, ports, methods, paths ---------------------------------------------- */

static int parse__hosts(struct parse__ctx *c, const struct al_yaml_node *n, struct policy__rule *r)
{
    char what[200];
    snprintf(what, sizeof what, "%s: hosts", c->what);
    if (al_yaml_strlist(n, what, false, c->d))
        return -EINVAL;
    if (n->n == 0)
        return PERR(c, n, "empty_hosts",
                    "%s: hosts is empty; list at least one host, or remove the rule", c->what);
    struct policy__arena *a = &c->p->arena;
    r->patterns = policy__alloc(a, n->n * sizeof *r->patterns);
    const char **texts = policy__alloc(a, n->n * sizeof *texts);
    unsigned *lines = policy__alloc(a, n->n * sizeof *lines);
    unsigned *cols = policy__alloc(a, n->n * sizeof *cols);
    if (!r->patterns || !texts || !lines || !cols)
        return -ENOMEM;
    int rc = 0;
    size_t k = 0;
    for (size_t i = 0; i < n->n; i++) {
        const struct al_yaml_node *it = n->items[i];
        struct policy_pattern pat;
        struct al_error err = {0};
        if (policy_pattern_canon(it->str, it->len, &pat, &err)) {
            rc = PERR(c, it, "bad_host", "%s: %s", c->what, err.msg);
            continue;
        }
        if (pat.kind == POLICY_PATTERN_EXACT && policy__is_public_suffix(pat.base, true)) {
            rc = PERR(c, it, "public_suffix",
                      "%s: '%s' is a public suffix (a top-level or registry domain such as com "
                      "or co.uk), not a host; name the host itself (e.g. www.example.%s)",
                      c->what, pat.text, pat.text);
            continue;
        }
        if (pat.kind != POLICY_PATTERN_EXACT && policy__is_public_suffix(pat.base, true)) {
            rc = PERR(c, it, "wildcard_public_suffix",
                      "%s: '%s' would match every site under the public suffix '%s'; name the "
                      "registrable domain (e.g. *.example.%s)",
                      c->what, pat.text, pat.base, pat.base);
            continue;
        }
        bool dup = false;
        for (size_t j = 0; j < k; j++)
            dup |= strcmp(r->patterns[j].text, pat.text) == 0;
        if (dup) {
            PWARN(c, it, "duplicate_host", "%s: host '%s' is listed twice", c->what, pat.text);
            continue;
        }
        policy__lint_host(&pat, it, c->what, c->d);
        r->patterns[k] = pat;
        r->patterns[k].base = r->patterns[k].text + (pat.base - pat.text);
        texts[k] = r->patterns[k].text;
        lines[k] = it->line;
        cols[k] = it->col;
        k++;
    }
    r->pub.hosts = texts;
    r->pub.n_hosts = k;
    r->host_lines = lines;
    r->host_cols = cols;
    return rc;
}

static int parse__cidrs(struct parse__ctx *c, const struct al_yaml_node *n, struct policy__rule *r)
{
    char what[200];
    snprintf(what, sizeof what, "%s: cidrs", c->what);
    if (al_yaml_strlist(n, what, false, c->d))
        return -EINVAL;
    if (n->n == 0)
        return PERR(c, n, "empty_cidrs",
                    "%s: cidrs is empty; list at least one network, or remove the rule", c->what);
    struct policy__arena *a = &c->p->arena;
    r->cidrs = policy__alloc(a, n->n * sizeof *r->cidrs);
    const char **texts = policy__alloc(a, n->n * sizeof *texts);
    unsigned *lines = policy__alloc(a, n->n * sizeof *lines);
    unsigned *cols = policy__alloc(a, n->n * sizeof *cols);
    if (!r->cidrs || !texts || !lines || !cols)
        return -ENOMEM;
    int rc = 0;
    size_t k = 0;
    for (size_t i = 0; i < n->n; i++) {
        const struct al_yaml_node *it = n->items[i];
        struct policy__cidr cidr;
        struct al_error err = {0};
        if (policy__cidr_parse(it->str, &cidr, &err)) {
            rc = PERR(c, it, "bad_cidr", "%s: %s", c->what, err.msg);
            continue;
        }
        unsigned minbits = cidr.net.family == AF_INET ? 8 : 16;
        if (cidr.bits < minbits) {
            char buf[80];
            rc = PERR(c, it, "cidr_too_broad",
                      "%s: %s opens more than a /%u: that is nearly every address, internal "
                      "ones included; list the networks you need",
                      c->what, policy__cidr_format(&cidr, buf, sizeof buf), minbits);
            continue;
        }
        char buf[80];
        policy__cidr_format(&cidr, buf, sizeof buf);
        bool dup = false;
        for (size_t j = 0; j < k; j++)
            dup |= strcmp(texts[j], buf) == 0;
        if (dup) {
            PWARN(c, it, "duplicate_cidr", "%s: %s is listed twice", c->what, buf);
            continue;
        }
        policy__lint_cidr(&cidr, it, c->what, c->d);
        r->cidrs[k] = cidr;
        texts[k] = policy__strdup(a, buf);
        lines[k] = it->line;
        cols[k] = it->col;
        k++;
    }
    r->pub.cidrs = texts;
    r->pub.n_cidrs = k;
    r->host_lines = lines;
    r->host_cols = cols;
    return rc;
}

static int parse__port_range_cmp(const void *a, const void *b)
{
    const struct policy_port_range *x = a, *y = b;
    return x->lo != y->lo ? (x->lo < y->lo ? -1 : 1) : (x->hi < y->hi ? -1 : x->hi > y->hi);
}

static int parse__ports(struct parse__ctx *c, const struct al_yaml_node *n, struct policy__rule *r)
{
    if (n->kind != AL_YAML_SEQ) {
        if (n->kind == AL_YAML_SCALAR && !al_yaml_is_null(n))
            return PERR(c, n, "wrong_type", "%s: ports must be a list: write ports: [%s]", c->what,
                        n->str);
        return PERR(c, n, "wrong_type", "%s: ports must be a list of port numbers, not %s", c->what,
                    al_yaml_describe(n));
    }
    if (n->n == 0)
        return PERR(c, n, "empty_ports",
                    "%s: ports is empty; list ports, or remove the key for the scheme's default",
                    c->what);
    struct policy_port_range *v = policy__alloc(&c->p->arena, n->n * sizeof *v);
    if (!v)
        return -ENOMEM;
    int rc = 0;
    size_t k = 0;
    for (size_t i = 0; i < n->n; i++) {
        const struct al_yaml_node *it = n->items[i];
        if (it->kind == AL_YAML_SCALAR && !al_yaml_is_null(it) && strchr(it->str, '-') &&
            it->str[0] != '-') {
            unsigned lo, hi;
            char extra;
            if (sscanf(it->str, "%5u-%5u%c", &lo, &hi, &extra) != 2 || lo < 1 || hi > 65535 ||
                lo > hi) {
                rc = PERR(c, it, "bad_port",
                          "%s: port range '%s' must be LOW-HIGH with 1 <= LOW <= HIGH <= 65535",
                          c->what, it->str);
                continue;
            }
            v[k++] = (struct policy_port_range){(uint16_t)lo, (uint16_t)hi};
            continue;
        }
        int64_t port;
        char what[200];
        snprintf(what, sizeof what, "%s: port", c->what);
        if (al_yaml_int(it, what, 1, 65535, &port, c->d)) {
            rc = -EINVAL;
            continue;
        }
        v[k++] = (struct policy_port_range){(uint16_t)port, (uint16_t)port};
    }
    qsort(v, k, sizeof *v, parse__port_range_cmp);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (m && v[i].lo <= (uint32_t)v[m - 1].hi + 1) {
            if (v[i].hi > v[m - 1].hi)
                v[m - 1].hi = v[i].hi;
        } else {
            v[m++] = v[i];
        }
    }
    if (m < k)
        PWARN(c, n, "duplicate_port", "%s: ports overlap or repeat", c->what);
    r->pub.ports = v;
    r->pub.n_ports = m;
    return rc;
}

static int parse__str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *const parse__known_methods[] = {
    "GET",      "HEAD",      "POST",  "PUT",  "DELETE", "OPTIONS", "PATCH",  "TRACE",  "CONNECT",
    "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE",   "LOCK",    "UNLOCK", "REPORT", NULL};

static int parse__methods(struct parse__ctx *c, const struct al_yaml_node *n,
                          struct policy__rule *r)
{
    char what[200];
    snprintf(what, sizeof what, "%s: methods", c->what);
    if (al_yaml_strlist(n, what, true, c->d))
        return -EINVAL;
    struct policy__arena *a = &c->p->arena;
    const char **all = policy__alloc(a, n->n * sizeof *all);
    const char **ext = policy__alloc(a, n->n * sizeof *ext);
    if (!all || !ext)
        return -ENOMEM;
    size_t k = 0, ne = 0;
    int rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        const struct al_yaml_node *it = n->items[i];
        const char *m = it->str;
        if (!policy__method_token_valid(m, it->len)) {
            rc = PERR(c, it, "bad_method", "%s: '%s' is not a valid HTTP method token", c->what, m);
            continue;
        }
        bool known_upper = false;
        for (size_t j = 0; parse__known_methods[j]; j++) {
            if (strcmp(m, parse__known_methods[j]) == 0)
                known_upper = true;
            else if (strcasecmp(m, parse__known_methods[j]) == 0) {
                rc = PERR(c, it, "bad_method",
                          "%s: methods are case-sensitive in HTTP: write %s, not %s", c->what,
                          parse__known_methods[j], m);
                goto next;
            }
        }
        if (strcmp(m, "CONNECT") == 0) {
            rc = PERR(c, it, "bad_method",
                      "%s: CONNECT cannot be allowed: a tunnel inside an inspected connection "
                      "would bypass the policy",
                      c->what);
            continue;
        }
        if (!known_upper)
            PWARN(c, it, "unknown_method", "%s: '%s' is not a standard HTTP method", c->what, m);
        bool dup = false;
        for (size_t j = 0; j < k; j++)
            dup |= strcmp(all[j], m) == 0;
        if (dup) {
            PWARN(c, it, "duplicate_method", "%s: method %s is listed twice", c->what, m);
            continue;
        }
        all[k++] = policy__strdup(a, m);
        uint32_t bit = policy__method_bit(m, it->len);
        if (bit)
            r->method_bits |= bit;
        else
            ext[ne++] = all[k - 1];
    next:;
    }
    qsort(all, k, sizeof *all, parse__str_cmp);
    r->pub.methods = all;
    r->pub.n_methods = k;
    r->ext_methods = ext;
    r->n_ext_methods = ne;
    return rc;
}

/* body_methods: which of the methods without body semantics may carry a body on this rule. */
static int parse__body_methods(struct parse__ctx *c, const struct al_yaml_node *n,
                               struct policy__rule *r)
{
    static const char *const allowed[] = {"GET", "HEAD", "OPTIONS", "DELETE", "TRACE", NULL};
    char what[200];
    snprintf(what, sizeof what, "%s: body_methods", c->what);
    if (al_yaml_strlist(n, what, true, c->d))
        return -EINVAL;
    const char **v = policy__alloc(&c->p->arena, n->n * sizeof *v);
    if (!v)
        return -ENOMEM;
    size_t k = 0;
    int rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        const struct al_yaml_node *it = n->items[i];
        const char *m = it->str;
        size_t j = 0;
        while (allowed[j] && strcmp(allowed[j], m) != 0)
            j++;
        if (!allowed[j]) {
            size_t u = 0;
            while (allowed[u] && strcasecmp(allowed[u], m) != 0)
                u++;
            if (allowed[u])
                rc = PERR(c, it, "bad_method",
                          "%s: methods are case-sensitive in HTTP: write %s, not %s", what,
                          allowed[u], m);
            else
                rc = PERR(c, it, "bad_body_method",
                          "%s: '%s' requests may always carry a body; list only GET, HEAD, "
                          "OPTIONS, DELETE or TRACE here (the methods whose bodies the proxy "
                          "refuses unless a rule allows them)",
                          what, m);
            continue;
        }
        uint32_t bit = policy__method_bit(m, it->len);
        if (r->body_bits & bit) {
            PWARN(c, it, "duplicate_method", "%s: method %s is listed twice", what, m);
            continue;
        }
        if (r->pub.n_methods && !(r->method_bits & bit))
            PWARN(c, it, "body_method_unused",
                  "%s: %s is not among the rule's methods, so it never applies here", what, m);
        r->body_bits |= bit;
        if (!(v[k++] = policy__strdup(&c->p->arena, m)))
            return -ENOMEM;
    }
    qsort(v, k, sizeof *v, parse__str_cmp);
    r->pub.body_methods = v;
    r->pub.n_body_methods = k;
    return rc;
}

static int parse__paths(struct parse__ctx *c, const struct al_yaml_node *n, struct policy__rule *r)
{
    char what[200];
    snprintf(what, sizeof what, "%s: paths", c->what);
    if (al_yaml_strlist(n, what, true, c->d))
        return -EINVAL;
    const char **v = policy__alloc(&c->p->arena, n->n * sizeof *v);
    if (!v)
        return -ENOMEM;
    size_t k = 0;
    int rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        const struct al_yaml_node *it = n->items[i];
        char buf[1100];
        struct al_error err = {0};
        if (policy__path_pattern_canon(it->str, buf, sizeof buf, &err)) {
            rc = PERR(c, it, "bad_path", "%s: path pattern '%s': %s", c->what, it->str, err.msg);
            continue;
        }
        bool dup = false;
        for (size_t j = 0; j < k; j++)
            dup |= strcmp(v[j], buf) == 0;
        if (dup) {
            PWARN(c, it, "duplicate_path", "%s: path '%s' is listed twice", c->what, buf);
            continue;
        }
        if (strcmp(buf, "/**") == 0)
            PWARN(c, it, "path_matches_all",
                  "%s: path '/**' matches every path; remove paths to say so", c->what);
        if (!(v[k++] = policy__strdup(&c->p->arena, buf)))
            return -ENOMEM;
    }
    qsort(v, k, sizeof *v, parse__str_cmp);
    r->pub.paths = v;
    r->pub.n_paths = k;
    return rc;
}

/* ---- a rule --------------------------------------------------------------------------- */

static const char *const parse__rule_keys[] = {"name",
                                               "description",
                                               "hosts",
                                               "cidrs",
                                               "ports",
                                               "scheme",
                                               "tls",
                                               "methods",
                                               "paths",
                                               "inject",
                                               "action",
                                               "mode",
                                               "websocket",
                                               "allow_plaintext_inject",
                                               "scrub",
                                               "body_methods",
                                               "api_transforms",
                                               NULL};

static int parse__rule(struct parse__ctx *c, const struct al_yaml_node *n, size_t idx,
                       struct policy__rule *r)
{
    snprintf(c->what, sizeof c->what, "rule %zu", idx + 1);
    r->pub.index = (unsigned)idx;
    r->pub.line = n->line;
    r->col = n->col;
    char fallback[32];
    snprintf(fallback, sizeof fallback, "rule-%zu", idx + 1);
    r->pub.name = policy__strdup(&c->p->arena, fallback);
    if (!r->pub.name)
        return -ENOMEM;
    if (n->kind != AL_YAML_MAP)
        return PERR(c, n, "wrong_type", "rule %zu must be a map (name:, hosts:, ...), not %s",
                    idx + 1, al_yaml_describe(n));
    int rc = 0;
    const struct al_yaml_node *v;
    const char *s;
    if ((v = al_yaml_get(n, "name"))) {
        if (al_yaml_str(v, "rule name", &s, c->d)) {
            rc = -EINVAL;
        } else if (!parse__ident_valid(s)) {
            rc = PERR(c, v, "bad_name",
                      "rule name '%s' must be 1-64 letters, digits, '-', '_' or '.', starting "
                      "with a letter or digit",
                      s);
        } else {
            if (!(r->pub.name = policy__strdup(&c->p->arena, s)))
                return -ENOMEM;
            snprintf(c->what, sizeof c->what, "rule '%s'", s);
        }
    } else {
        rc = PERR(c, n, "missing_key", "rule %zu has no name: add name: <short-id>", idx + 1);
    }
    if (al_yaml_expect_map(n, c->what, parse__rule_keys, c->d))
        rc = -EINVAL;
    if ((v = al_yaml_get(n, "description"))) {
        if (al_yaml_str(v, "description", &s, c->d))
            rc = -EINVAL;
        else
            r->pub.description = policy__strdup(&c->p->arena, s);
    }
    int e;
    static const char *const actions[] = {"allow", "deny", NULL};
    static const char *const modes[] = {"enforce", "report", NULL};
    static const char *const schemes[] = {"https", "http", "tcp", NULL};
    static const char *const tlss[] = {"passthrough", "inspect", NULL};
    static const char *const scrubs[] = {"strict", "best_effort", NULL};
    char what[200];
    r->pub.action = POLICY_ACTION_ALLOW;
    if ((v = al_yaml_get(n, "action"))) {
        snprintf(what, sizeof what, "%s: action", c->what);
        if (al_yaml_enum(v, what, actions, &e, c->d))
            rc = -EINVAL;
        else
            r->pub.action = (enum policy_action)e;
    }
    const struct al_yaml_node *mode_n = al_yaml_get(n, "mode");
    bool rule_report = false, rule_enforce = false;
    if (mode_n) {
        snprintf(what, sizeof what, "%s: mode", c->what);
        if (al_yaml_enum(mode_n, what, modes, &e, c->d))
            rc = -EINVAL;
        else if (e == 1)
            rule_report = true;
        else
            rule_enforce = true;
    }
    r->pub.report = rule_report || c->p->mode == POLICY_MODE_REPORT;
    if (rule_enforce && c->p->mode == POLICY_MODE_REPORT)
        PWARN(c, mode_n, "mode_ignored",
              "%s: mode: enforce has no effect in a policy whose mode is report (nothing is "
              "enforced until the policy's mode is enforce)",
              c->what);
    r->pub.scheme = POLICY_SCHEME_HTTPS;
    const struct al_yaml_node *scheme_n = al_yaml_get(n, "scheme");
    if (scheme_n) {
        snprintf(what, sizeof what, "%s: scheme", c->what);
        if (al_yaml_enum(scheme_n, what, schemes, &e, c->d))
            rc = -EINVAL;
        else
            r->pub.scheme = (enum policy_scheme)e;
    }
    const struct al_yaml_node *hosts_n = al_yaml_get(n, "hosts"),
                              *cidrs_n = al_yaml_get(n, "cidrs");
    if (hosts_n && cidrs_n) {
        rc = PERR(c, cidrs_n, "hosts_and_cidrs",
                  "%s has both hosts and cidrs; a rule matches names or addresses, not both: "
                  "split it into two rules",
                  c->what);
    } else if (!hosts_n && !cidrs_n) {
        rc = PERR(c, n, "no_target", "%s needs hosts: [...] (names) or cidrs: [...] (addresses)",
                  c->what);
    } else if (hosts_n) {
        int hrc = parse__hosts(c, hosts_n, r);
        if (hrc == -ENOMEM)
            return hrc;
        if (hrc)
            rc = -EINVAL;
    } else {
        int crc = parse__cidrs(c, cidrs_n, r);
        if (crc == -ENOMEM)
            return crc;
        if (crc)
            rc = -EINVAL;
    }
    if (hosts_n && r->pub.scheme == POLICY_SCHEME_TCP)
        rc = PERR(c, scheme_n, "tcp_needs_cidrs",
                  "%s: scheme: tcp works only with cidrs: a raw TCP connection carries no host "
                  "name the proxy could check",
                  c->what);
    const struct al_yaml_node *ports_n = al_yaml_get(n, "ports");
    if (ports_n) {
        int prc = parse__ports(c, ports_n, r);
        if (prc == -ENOMEM)
            return prc;
        if (prc)
            rc = -EINVAL;
        for (size_t i = 0; i < r->pub.n_ports; i++) {
            const struct policy_port_range *pr = &r->pub.ports[i];
            if (r->pub.scheme == POLICY_SCHEME_HTTPS && pr->lo <= 80 && pr->hi >= 80)
                PWARN(c, ports_n, "port_scheme",
                      "%s: port 80 with scheme https (TLS); plain HTTP needs scheme: http",
                      c->what);
            if (r->pub.scheme == POLICY_SCHEME_HTTP && pr->lo <= 443 && pr->hi >= 443)
                PWARN(c, ports_n, "port_scheme",
                      "%s: port 443 with scheme http (plain text); TLS needs scheme: https",
                      c->what);
        }
    } else {
        struct policy_port_range *pr = policy__alloc(&c->p->arena, sizeof *pr);
        if (!pr)
            return -ENOMEM;
        if (r->pub.scheme == POLICY_SCHEME_TCP) {
            rc = PERR(c, n, "missing_key", "%s: scheme: tcp has no default port: list ports: [...]",
                      c->what);
        }
        pr->lo = pr->hi = r->pub.scheme == POLICY_SCHEME_HTTP ? 80 : 443;
        r->pub.ports = pr;
        r->pub.n_ports = 1;
    }
    const struct al_yaml_node *methods_n = al_yaml_get(n, "methods"),
                              *paths_n = al_yaml_get(n, "paths"),
                              *inject_n = al_yaml_get(n, "inject"), *tls_n = al_yaml_get(n, "tls"),
                              *ws_n = al_yaml_get(n, "websocket"),
                              *api_n = al_yaml_get(n, "allow_plaintext_inject"),
                              *scrub_n = al_yaml_get(n, "scrub"),
                              *body_n = al_yaml_get(n, "body_methods"),
                              *apt_n = al_yaml_get(n, "api_transforms");
    if (apt_n) {
        static const char *const apts[] = {"deny", "allow", NULL};
        snprintf(what, sizeof what, "%s: api_transforms", c->what);
        if (al_yaml_enum(apt_n, what, apts, &e, c->d))
            rc = -EINVAL;
        else
            r->pub.api_transforms = e == 1;
    }
    const struct al_yaml_node *apt_on = r->pub.api_transforms ? apt_n : NULL;
    /* API-given headers are credentials toward the rule's hosts: only over TLS the proxy
     * terminates (so it can add them, and only toward a name it certified), on allow rules. */
    if (apt_on && r->pub.action == POLICY_ACTION_DENY)
        rc = PERR(c, apt_n, "api_transforms_on_deny",
                  "%s: a deny rule sends nothing anywhere: remove api_transforms or make the "
                  "rule allow",
                  c->what);
    else if (apt_on && (r->pub.scheme != POLICY_SCHEME_HTTPS || cidrs_n))
        rc = PERR(c, apt_n, "api_transforms_needs_https_hosts",
                  "%s: api_transforms needs scheme: https and hosts (the headers are added "
                  "only inside TLS the proxy terminates for a name); remove it or use "
                  "hosts with scheme https",
                  c->what);
    if (methods_n) {
        int mrc = parse__methods(c, methods_n, r);
        if (mrc == -ENOMEM)
            return mrc;
        if (mrc)
            rc = -EINVAL;
    }
    if (body_n) {
        int brc = parse__body_methods(c, body_n, r);
        if (brc == -ENOMEM)
            return brc;
        if (brc)
            rc = -EINVAL;
    }
    if (paths_n) {
        int prc = parse__paths(c, paths_n, r);
        if (prc == -ENOMEM)
            return prc;
        if (prc)
            rc = -EINVAL;
    }
    if (inject_n) {
        int irc = parse__inject(c, inject_n, r);
        if (irc == -ENOMEM)
            return irc;
        if (irc)
            rc = -EINVAL;
    }
    r->conditional = methods_n || paths_n;
    if (r->pub.scheme == POLICY_SCHEME_TCP) {
        const struct al_yaml_node *l7 = methods_n  ? methods_n
                                        : paths_n  ? paths_n
                                        : inject_n ? inject_n
                                        : ws_n     ? ws_n
                                        : body_n   ? body_n
                                                   : tls_n;
        if (l7)
            rc = PERR(c, l7, "tcp_no_http",
                      "%s: scheme: tcp is raw bytes: methods, paths, inject, websocket, "
                      "body_methods and tls need scheme: http or https",
                      c->what);
    }
    /* TLS mode. */
    bool needs_l7 = methods_n || paths_n || inject_n || (apt_on && !cidrs_n);
    r->pub.tls = POLICY_TLS_NONE;
    if (r->pub.scheme == POLICY_SCHEME_HTTPS) {
        r->pub.tls = needs_l7 ? POLICY_TLS_INSPECT : POLICY_TLS_PASSTHROUGH;
        if (tls_n) {
            snprintf(what, sizeof what, "%s: tls", c->what);
            if (al_yaml_enum(tls_n, what, tlss, &e, c->d)) {
                rc = -EINVAL;
            } else if (e == 0 && needs_l7) {
                rc = PERR(c, tls_n, "passthrough_needs_inspect",
                          "%s: tls: passthrough cannot enforce %s: the proxy cannot see HTTP "
                          "inside a TLS stream it does not terminate; remove 'tls: "
                          "passthrough' (inspect is implied) or remove %s",
                          c->what,
                          inject_n    ? "inject"
                          : methods_n ? "methods"
                          : paths_n   ? "paths"
                                      : "api_transforms",
                          inject_n    ? "inject"
                          : methods_n ? "methods"
                          : paths_n   ? "paths"
                                      : "api_transforms");
            } else {
                r->pub.tls = e == 1 ? POLICY_TLS_INSPECT : POLICY_TLS_PASSTHROUGH;
            }
        }
        if (cidrs_n && r->pub.tls == POLICY_TLS_INSPECT)
            rc = PERR(c, tls_n ? tls_n : cidrs_n, "inspect_needs_name",
                      "%s: TLS inspection needs a host name (certificates are minted per name); "
                      "cidrs rules with scheme https are passthrough: use hosts, or scheme: http",
                      c->what);
    } else if (tls_n && r->pub.scheme == POLICY_SCHEME_HTTP) {
        rc = PERR(c, tls_n, "tls_on_http",
                  "%s: scheme: http is plain text, there is no TLS to inspect or pass "
                  "through: remove tls",
                  c->what);
    }
    if (ws_n) {
        snprintf(what, sizeof what, "%s: websocket", c->what);
        if (al_yaml_bool(ws_n, what, &r->pub.websocket, c->d))
            rc = -EINVAL;
        else if (r->pub.websocket && r->pub.tls == POLICY_TLS_PASSTHROUGH)
            PWARN(c, ws_n, "websocket_passthrough",
                  "%s: websocket: true has no effect with TLS passthrough (the proxy does not "
                  "see HTTP inside the stream, upgrades pass unseen)",
                  c->what);
    }
    if (api_n) {
        snprintf(what, sizeof what, "%s: allow_plaintext_inject", c->what);
        if (al_yaml_bool(api_n, what, &r->pub.allow_plaintext_inject, c->d))
            rc = -EINVAL;
        else if (r->pub.allow_plaintext_inject &&
                 (r->pub.scheme != POLICY_SCHEME_HTTP || !inject_n))
            rc = PERR(c, api_n, "plaintext_inject_unused",
                      "%s: allow_plaintext_inject applies only to scheme: http rules that "
                      "inject; remove it",
                      c->what);
    }
    if (inject_n) {
        if (r->pub.action == POLICY_ACTION_DENY)
            rc = PERR(c, inject_n, "inject_on_deny",
                      "%s: a deny rule cannot inject: remove inject or make the rule allow",
                      c->what);
        if (r->pub.scheme == POLICY_SCHEME_HTTP && !r->pub.allow_plaintext_inject)
            rc = PERR(c, inject_n, "plaintext_inject",
                      "%s: inject on plain HTTP would send the credential unencrypted to "
                      "whoever answers; use scheme: https, or set allow_plaintext_inject: true "
                      "if you accept that",
                      c->what);
        r->pub.scrub = POLICY_SCRUB_STRICT;
    }
    if (apt_on)
        r->pub.scrub = POLICY_SCRUB_STRICT;
    if (scrub_n) {
        snprintf(what, sizeof what, "%s: scrub", c->what);
        if (al_yaml_enum(scrub_n, what, scrubs, &e, c->d))
            rc = -EINVAL;
        else if (!inject_n && !apt_on)
            rc = PERR(c, scrub_n, "scrub_without_inject",
                      "%s: scrub applies to responses of rules that inject (or take "
                      "api_transforms); remove it",
                      c->what);
        else
            r->pub.scrub = e == 0 ? POLICY_SCRUB_STRICT : POLICY_SCRUB_BEST_EFFORT;
    }
    if (body_n && r->pub.action == POLICY_ACTION_ALLOW && r->pub.scheme != POLICY_SCHEME_TCP) {
        char list[64] = "";
        for (size_t i = 0; i < r->pub.n_body_methods; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     r->pub.body_methods[i]);
        if (r->pub.tls == POLICY_TLS_PASSTHROUGH)
            PWARN(c, body_n, "body_methods_passthrough",
                  "%s: body_methods has no effect with TLS passthrough (the proxy does not see "
                  "the requests inside the stream, nor their bodies)",
                  c->what);
        else if (r->pub.n_body_methods)
            PWARN(c, body_n, "request_body_methods",
                  "%s: %s requests with a body are allowed here: an upstream that ignores the "
                  "body of such a request (several frameworks do) reads it as a second request "
                  "that the policy never decided (request smuggling, \"CL.0\"); keep this only "
                  "for an API that needs it, toward upstreams you know read the body",
                  c->what, list);
    }
    if (r->pub.action == POLICY_ACTION_DENY && (ws_n || scrub_n || body_n))
        rc = PERR(c,
                  ws_n      ? ws_n
                  : scrub_n ? scrub_n
                            : body_n,
                  "deny_option",
                  "%s: websocket, scrub and body_methods have no meaning on a deny rule: remove "
                  "them",
                  c->what);
    return rc;
}

/* ---- the document --------------------------------------------------------------------- */

static const char *const parse__top_keys[] = {"version", "name", "description", "mode",
                                              "rules",   "dns",  "limits",      NULL};

static int parse__dns(struct parse__ctx *c, const struct al_yaml_node *n)
{
    static const char *const keys[] = {"resolve", "min_ttl", "max_ttl", NULL};
    static const char *const resolves[] = {"allowed", "none", NULL};
    if (al_yaml_expect_map(n, "dns", keys, c->d))
        return -EINVAL;
    int rc = 0, e;
    const struct al_yaml_node *v;
    if ((v = al_yaml_get(n, "resolve"))) {
        if (al_yaml_enum(v, "dns.resolve", resolves, &e, c->d))
            rc = -EINVAL;
        else
            c->p->dns.resolve = (enum policy_dns_resolve)e;
    }
    if ((v = al_yaml_get(n, "min_ttl")) &&
        al_yaml_duration_ms(v, "dns.min_ttl", 0, 86400000, &c->p->dns.min_ttl_ms, c->d))
        rc = -EINVAL;
    if ((v = al_yaml_get(n, "max_ttl")) &&
        al_yaml_duration_ms(v, "dns.max_ttl", 1000, 86400000, &c->p->dns.max_ttl_ms, c->d))
        rc = -EINVAL;
    if (rc == 0 && c->p->dns.min_ttl_ms > c->p->dns.max_ttl_ms)
        rc = PERR(c, al_yaml_get(n, "min_ttl") ? al_yaml_get(n, "min_ttl") : n, "bad_ttl",
                  "dns.min_ttl is larger than dns.max_ttl");
    return rc;
}

static int parse__limits(struct parse__ctx *c, const struct al_yaml_node *n)
{
    static const char *const keys[] = {"max_connections", "max_request_body",
                                       "max_requests_per_second", NULL};
    if (al_yaml_expect_map(n, "limits", keys, c->d))
        return -EINVAL;
    int rc = 0;
    const struct al_yaml_node *v;
    int64_t i;
    if ((v = al_yaml_get(n, "max_connections"))) {
        if (al_yaml_int(v, "limits.max_connections", 1, 1000000, &i, c->d))
            rc = -EINVAL;
        else
            c->p->limits.max_connections = (uint64_t)i;
    }
    if ((v = al_yaml_get(n, "max_request_body")) &&
        al_yaml_size(v, "limits.max_request_body", 1, 1ull << 40, &c->p->limits.max_request_body,
                     c->d))
        rc = -EINVAL;
    if ((v = al_yaml_get(n, "max_requests_per_second"))) {
        if (al_yaml_int(v, "limits.max_requests_per_second", 1, 1000000, &i, c->d))
            rc = -EINVAL;
        else
            c->p->limits.max_requests_per_second = (uint64_t)i;
    }
    return rc;
}

int policy__parse(struct policy *p, const struct al_yaml_node *root, const char *file,
                  struct al_diags *d);

static int parse__rule_name_cmp(const void *a, const void *b, void *ctx)
{
    const struct policy__rule *rules = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(rules[x].pub.name, rules[y].pub.name);
    return c ? c : (x < y ? -1 : x > y);
}

int policy__parse(struct policy *p, const struct al_yaml_node *root, const char *file,
                  struct al_diags *d)
{
    struct parse__ctx c = {.p = p, .d = d};
    if (!root || al_yaml_is_null(root))
        return al_diags_add(d, AL_DIAG_ERROR, file, 0, 0, "empty",
                            "the policy is empty: it needs at least version: 1, name: and "
                            "rules:");
    if (al_yaml_expect_map(root, "the policy", parse__top_keys, d) && root->kind != AL_YAML_MAP)
        return -EINVAL;
    int rc = 0;
    const struct al_yaml_node *v;
    int64_t version;
    if (!(v = al_yaml_get(root, "version"))) {
        rc = PERR(&c, root, "missing_key",
                  "the policy has no version: add version: %d as the first line", POLICY_VERSION);
    } else if (al_yaml_int(v, "version", 1, 1000, &version, d)) {
        rc = -EINVAL;
    } else if (version != POLICY_VERSION) {
        rc = PERR(&c, v, "bad_version",
                  "policy language version %lld is not supported by this airlock (it reads "
                  "version %d)",
                  (long long)version, POLICY_VERSION);
    }
    const char *s;
    if (!(v = al_yaml_get(root, "name"))) {
        rc = PERR(&c, root, "missing_key", "the policy has no name: add name: <short-id>");
    } else if (al_yaml_str(v, "name", &s, d)) {
        rc = -EINVAL;
    } else if (!parse__ident_valid(s)) {
        rc = PERR(&c, v, "bad_name",
                  "policy name '%s' must be 1-64 letters, digits, '-', '_' or '.', starting with "
                  "a letter or digit",
                  s);
    } else {
        p->name = policy__strdup(&p->arena, s);
    }
    if (!p->name)
        p->name = policy__strdup(&p->arena, "unnamed");
    if ((v = al_yaml_get(root, "description"))) {
        if (al_yaml_str(v, "description", &s, d))
            rc = -EINVAL;
        else
            p->description = policy__strdup(&p->arena, s);
    }
    static const char *const modes[] = {"enforce", "report", NULL};
    int e;
    if ((v = al_yaml_get(root, "mode"))) {
        if (al_yaml_enum(v, "mode", modes, &e, d))
            rc = -EINVAL;
        else
            p->mode = (enum policy_mode)e;
        if (p->mode == POLICY_MODE_REPORT)
            PWARN(&c, v, "report_mode",
                  "mode: report allows everything and only logs what would be denied; switch "
                  "to mode: enforce once the log is clean");
    }
    p->dns.resolve = POLICY_DNS_ALLOWED;
    p->dns.min_ttl_ms = 5000;
    p->dns.max_ttl_ms = 300000;
    if ((v = al_yaml_get(root, "dns")) && parse__dns(&c, v))
        rc = -EINVAL;
    if ((v = al_yaml_get(root, "limits")) && parse__limits(&c, v))
        rc = -EINVAL;
    const struct al_yaml_node *rules = al_yaml_get(root, "rules");
    if (!rules) {
        rc = PERR(&c, root, "missing_key",
                  "the policy has no rules: add rules: [] to deny everything, or list rules");
        return rc;
    }
    if (rules->kind != AL_YAML_SEQ)
        return PERR(&c, rules, "wrong_type",
                    "rules must be a list of rules (lines starting with '- name:'), not %s",
                    al_yaml_describe(rules));
    if (rules->n > 1000000)
        return PERR(&c, rules, "too_many_rules", "more than 1,000,000 rules");
    p->rules = policy__alloc(&p->arena, (rules->n ? rules->n : 1) * sizeof *p->rules);
    if (!p->rules)
        return -ENOMEM;
    p->n_rules = rules->n;
    for (size_t i = 0; i < rules->n; i++) {
        int rrc = parse__rule(&c, rules->items[i], i, &p->rules[i]);
        if (rrc == -ENOMEM)
            return rrc;
        if (rrc)
            rc = -EINVAL;
    }
    /* Unique rule names (they appear in audit records): sort indices by name. */
    size_t *ord = malloc((rules->n ? rules->n : 1) * sizeof *ord);
    if (!ord)
        return -ENOMEM;
    for (size_t i = 0; i < rules->n; i++)
        ord[i] = i;
    qsort_r(ord, rules->n, sizeof *ord, parse__rule_name_cmp, p->rules);
    for (size_t i = 1; i < rules->n; i++) {
        const struct policy__rule *a = &p->rules[ord[i - 1]], *b = &p->rules[ord[i]];
        const struct al_yaml_node *nn = al_yaml_get(rules->items[ord[i]], "name");
        if (strcmp(a->pub.name, b->pub.name) == 0 && nn)
            rc = PERR(&c, nn, "duplicate_rule",
                      "rule name '%s' is already used by the rule at line %u; rule names "
                      "must be unique (they appear in audit records)",
                      b->pub.name, a->pub.line);
    }
    free(ord);
    return rc;
}
