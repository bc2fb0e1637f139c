/* vmm/guest/sudoproto: the wire format between the sandbox's `sudo` program (sudo_main.c)
 * and the agent's root-on-request service (sudo.c), over the agent's unix stream socket.
 *
 * Owns: framing (type byte, 32-bit little-endian length, payload), the request's encoding
 * (tagged NUL-terminated strings) and its bounded parser, the limits both sides apply.
 * Pure: no libuv, no common/ (the `sudo` program links only this file), no allocation but
 * the parser's pointer arrays.
 *
 * A session: the client sends one REQ frame, with its stdin, stdout, stderr and an O_PATH
 * descriptor of its working directory attached (SCM_RIGHTS) to the frame's first bytes;
 * then SIG frames for the signals it receives. The agent answers once: EXIT (the wait
 * status of the command, or 0 for a validation) or REFUSE (why nothing was run), and
 * closes. A client that goes away ends its command (SIGKILL to the command's process group).
 */
#ifndef AIRLOCK_GUEST_SUDOPROTO_H
#define AIRLOCK_GUEST_SUDOPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where the agent listens (as the sandbox's init) and the client connects; the client's
 * AIRLOCK_SUDO_SOCKET overrides it (tests). */
#define AGENT_SUDO_SOCKET_DIR "/run/airlock"
#define AGENT_SUDO_SOCKET     "/run/airlock/sudo.sock"

/* The PATH a command run through sudo gets, sudo's secure_path on Debian. */
#define AGENT_SUDO_SECURE_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#define AGENT_SUDO_VERSION  "1"
#define AGENT_SUDO_HDR      5          /* type + length */
#define AGENT_SUDO_MAX_REQ  (4u << 20) /* a request: arguments and environment */
#define AGENT_SUDO_MAX_MSG  4096       /* a refusal's text */
#define AGENT_SUDO_MAX_ARGS 65536      /* arguments, and separately environment entries */
#define AGENT_SUDO_NFDS     4          /* stdin, stdout, stderr, working directory */

enum agent_sudo_frame {
    AGENT_SUDO_F_REQ = 'Q',    /* client: the request */
    AGENT_SUDO_F_SIG = 'K',    /* client: a signal to pass on (4 bytes, LE) */
    AGENT_SUDO_F_EXIT = 'X',   /* agent: the command's wait status (4 bytes, LE) */
    AGENT_SUDO_F_REFUSE = 'R', /* agent: nothing was run; the payload says why */
};

enum agent_sudo_mode {
    AGENT_SUDO_RUN = 'r',      /* run argv[0] with argv */
    AGENT_SUDO_SHELL = 's',    /* -s: the shell (caller's SHELL, else the target's) [-c cmd] */
    AGENT_SUDO_LOGIN = 'i',    /* -i: the target's login shell in its home [-c cmd] */
    AGENT_SUDO_VALIDATE = 'v', /* -v / -l: is the caller allowed? (EXIT 0 or REFUSE) */
};

/* Request items: a tag byte, then a NUL-terminated string. */
enum agent_sudo_tag {
    AGENT_SUDO_T_VERSION = 'v',  /* first item: AGENT_SUDO_VERSION */
    AGENT_SUDO_T_MODE = 'm',     /* one enum agent_sudo_mode character */
    AGENT_SUDO_T_USER = 'u',     /* target user name or #uid (default root) */
    AGENT_SUDO_T_PRESERVE = 'E', /* -E: keep the caller's environment ("" value) */
    AGENT_SUDO_T_KEEP = 'p',     /* --preserve-env=NAME: keep this variable */
    AGENT_SUDO_T_SETENV = 's',   /* NAME=value from the command line */
    AGENT_SUDO_T_ARG = 'a',      /* the command and its arguments, in order */
    AGENT_SUDO_T_ENV = 'e',      /* the caller's environment, NAME=value */
};

struct agent_sudo_req {
    char mode;
    const char *user; /* NULL: root */
    bool preserve_env;
    const char **argv, **env, **setenv, **keep; /* NULL-terminated; point into the buffer */
    size_t argc, envc, setenvc, keepc;
};

/* The 5-byte header of a frame. */
void agent_sudo_hdr(uint8_t type, uint32_t len, uint8_t out[AGENT_SUDO_HDR]);
/* Reads a header: -EPROTO for an unknown type or a length over its type's bound. */
int agent_sudo_hdr_parse(const uint8_t in[AGENT_SUDO_HDR], uint8_t *type, uint32_t *len);
uint32_t agent_sudo_u32(const uint8_t *p);
void agent_sudo_put_u32(uint8_t *p, uint32_t v);

/* Appends one item to buf (len advanced); -E2BIG past cap or AGENT_SUDO_MAX_REQ,
 * -EINVAL for a string holding a byte the encoding cannot carry (none: NUL ends it). */
int agent_sudo_req_add(uint8_t *buf, size_t cap, size_t *len, char tag, const char *s);

/* Parses a request payload in place (NULs are already there; buf must stay alive while req
 * is used). -EPROTO with a reason in why: a missing or unknown version, unknown tag, a
 * string without its NUL, a repeated single item, too many items, a bad mode, RUN without
 * a command. Free with agent_sudo_req_free. */
int agent_sudo_req_parse(char *buf, size_t len, struct agent_sudo_req *req, const char **why);
void agent_sudo_req_free(struct agent_sudo_req *req);

/* sudo's quoting of a command for `shell -c` (-s, -i): arguments joined by spaces, every
 * character but letters, digits, '_', '-' and '$' escaped with a backslash. Into out
 * (malloc'd); -ENOMEM. */
int agent_sudo_shell_quote(const char *const *argv, size_t argc, char **out);

#endif
