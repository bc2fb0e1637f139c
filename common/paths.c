/* common/paths: see paths.h. */
#include "paths.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char paths__state[4096];

const char *al_state_dir(void)
{
    if (paths__state[0])
        return paths__state;
    const char *env = getenv("AIRLOCK_STATE_DIR");
    if (env && *env)
        return env;
    return AL_DEFAULT_STATE_DIR;
}

const char *al_state_dir_arg(void)
{
    return paths__state[0] ? paths__state : NULL;
}

void al_set_state_dir(const char *dir)
{
    snprintf(paths__state, sizeof paths__state, "%s", dir ? dir : "");
    size_t n = strlen(paths__state);
    while (n > 1 && paths__state[n - 1] == '/')
        paths__state[--n] = '\0';
}

char *al_state_path(char *out, size_t outlen, const char *rel)
{
    int n = snprintf(out, outlen, "%s/%s", al_state_dir(), rel);
    if (n < 0 || (size_t)n >= outlen)
        return NULL;
    return out;
}

int al_take_state_dir_arg(int argc, char **argv)
{
    int o = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            while (i < argc)
                argv[o++] = argv[i++];
            break;
        }
        if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc) {
            al_set_state_dir(argv[++i]);
            continue;
        }
        if (strncmp(argv[i], "--state-dir=", 12) == 0) {
            al_set_state_dir(argv[i] + 12);
            continue;
        }
        argv[o++] = argv[i];
    }
    argv[o] = NULL;
    return o;
}

int al_self_dir(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0)
        return -errno;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    if ((size_t)snprintf(out, len, "%s", slash == exe ? "/" : exe) >= len)
        return -ENAMETOOLONG;
    return 0;
}
