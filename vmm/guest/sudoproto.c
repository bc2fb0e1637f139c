/* vmm/guest/sudoproto: see sudoproto.h. */
#include "sudoproto.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint32_t agent_sudo_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void agent_sudo_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

void agent_sudo_hdr(uint8_t type, uint32_t len, uint8_t out[AGENT_SUDO_HDR])
{
    out[0] = type;
    agent_sudo_put_u32(out + 1, len);
}

int agent_sudo_hdr_parse(const uint8_t in[AGENT_SUDO_HDR], uint8_t *type, uint32_t *len)
{
    *type = in[0];
    *len = agent_sudo_u32(in + 1);
    switch (in[0]) {
    case AGENT_SUDO_F_REQ:
        return *len <= AGENT_SUDO_MAX_REQ ? 0 : -EPROTO;
    case AGENT_SUDO_F_SIG:
    case AGENT_SUDO_F_EXIT:
        return *len == 4 ? 0 : -EPROTO;
    case AGENT_SUDO_F_REFUSE:
        return *len <= AGENT_SUDO_MAX_MSG ? 0 : -EPROTO;
    default:
        return -EPROTO;
    }
}

int agent_sudo_req_add(uint8_t *buf, size_t cap, size_t *len, char tag, const char *s)
{
    size_t n = strlen(s);
    if (cap > AGENT_SUDO_MAX_REQ)
        cap = AGENT_SUDO_MAX_REQ;
    if (*len > cap || n + 2 > cap - *len)
        return -E2BIG;
    buf[(*len)++] = (uint8_t)tag;
    memcpy(buf + *len, s, n + 1);
    *len += n + 1;
    return 0;
}

static int sudoproto__push(const char ***v, size_t *n, const char *s)
{
    if (*n >= AGENT_SUDO_MAX_ARGS)
        return -E2BIG;
    if ((*n & (*n - 1)) == 0) { /* at 0, 1, 2, 4, 8, ...: room for 2n items and the NULL */
        size_t cap = *n ? *n * 2 : 2;
        const char **nv = realloc((void *)*v, (cap + 1) * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        *v = nv;
    }
    (*v)[(*n)++] = s;
    (*v)[*n] = NULL;
    return 0;
}

static int sudoproto__terminate(const char ***v)
{
    if (*v)
        return 0;
    *v = calloc(1, sizeof **v);
    return *v ? 0 : -ENOMEM;
}

void agent_sudo_req_free(struct agent_sudo_req *req)
{
    free((void *)req->argv);
    free((void *)req->env);
    free((void *)req->setenv);
    free((void *)req->keep);
    memset(req, 0, sizeof *req);
}

int agent_sudo_req_parse(char *buf, size_t len, struct agent_sudo_req *req, const char **why)
{
    static const char *const dummy = "";
    const char *w = dummy;
    memset(req, 0, sizeof *req);
    bool have_version = false, have_mode = false;
    size_t i = 0;
    int r = 0;
    while (i < len) {
        char tag = buf[i++];
        char *s = buf + i;
        char *nul = memchr(s, '\0', len - i);
        if (!nul) {
            w = "an item without its terminating NUL";
            r = -EPROTO;
            break;
        }
        i = (size_t)(nul - buf) + 1;
        if (!have_version) {
            if (tag != AGENT_SUDO_T_VERSION || strcmp(s, AGENT_SUDO_VERSION) != 0) {
                w = "not a version 1 request (the sudo program and the agent differ)";
                r = -EPROTO;
                break;
            }
            have_version = true;
            continue;
        }
        switch (tag) {
        case AGENT_SUDO_T_MODE:
            if (have_mode || strlen(s) != 1 ||
                !strchr((char[]){AGENT_SUDO_RUN, AGENT_SUDO_SHELL, AGENT_SUDO_LOGIN,
                                 AGENT_SUDO_VALIDATE, 0},
                        s[0])) {
                w = have_mode ? "two modes" : "an unknown mode";
                r = -EPROTO;
            }
            have_mode = true;
            req->mode = s[0];
            break;
        case AGENT_SUDO_T_USER:
            if (req->user || !*s) {
                w = req->user ? "two target users" : "an empty target user";
                r = -EPROTO;
            }
            req->user = s;
            break;
        case AGENT_SUDO_T_PRESERVE:
            req->preserve_env = true;
            break;
        case AGENT_SUDO_T_KEEP:
            r = sudoproto__push(&req->keep, &req->keepc, s);
            break;
        case AGENT_SUDO_T_SETENV:
            if (!strchr(s, '=') || s[0] == '=') {
                w = "a command-line variable without NAME=";
                r = -EPROTO;
                break;
            }
            r = sudoproto__push(&req->setenv, &req->setenvc, s);
            break;
        case AGENT_SUDO_T_ARG:
            r = sudoproto__push(&req->argv, &req->argc, s);
            break;
        case AGENT_SUDO_T_ENV:
            r = sudoproto__push(&req->env, &req->envc, s);
            break;
        default:
            w = "an unknown item";
            r = -EPROTO;
        }
        if (r == -E2BIG)
            w = "more than 65536 arguments or environment entries";
        if (r < 0)
            break;
    }
    if (r == 0 && !have_version) {
        w = "an empty request";
        r = -EPROTO;
    }
    if (r == 0 && !have_mode) {
        w = "no mode";
        r = -EPROTO;
    }
    if (r == 0 && req->mode == AGENT_SUDO_RUN && (req->argc == 0 || !req->argv[0][0])) {
        w = "no command";
        r = -EPROTO;
    }
    if (r == 0)
        r = sudoproto__terminate(&req->argv);
    if (r == 0)
        r = sudoproto__terminate(&req->env);
    if (r == 0)
        r = sudoproto__terminate(&req->setenv);
    if (r == 0)
        r = sudoproto__terminate(&req->keep);
    if (r < 0) {
        if (r == -ENOMEM)
            w = "out of memory";
        agent_sudo_req_free(req);
    }
    if (why)
        *why = w;
    return r;
}

int agent_sudo_shell_quote(const char *const *argv, size_t argc, char **out)
{
    size_t n = 1;
    for (size_t i = 0; i < argc; i++)
        n += strlen(argv[i]) * 2 + 1;
    char *s = malloc(n);
    if (!s)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < argc; i++) {
        if (i)
            s[k++] = ' ';
        for (const char *c = argv[i]; *c; c++) {
            unsigned char ch = (unsigned char)*c;
            if (!isalnum(ch) && ch != '_' && ch != '-' && ch != '$')
                s[k++] = '\\';
            s[k++] = (char)ch;
        }
    }
    s[k] = '\0';
    *out = s;
    return 0;
}
