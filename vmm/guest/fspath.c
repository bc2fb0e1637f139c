/* vmm/guest/fspath: see fspath.h. */
#include "fspath.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

void agent_path_clean(char *path)
{
    /* Works on absolute paths; a relative input is treated as if rooted. */
    char *out = path;
    const char *p = path;
    size_t o = 0;
    char buf[PATH_MAX * 2];
    size_t n = strlen(path);
    if (n >= sizeof buf)
        n = sizeof buf - 1;
    memcpy(buf, path, n);
    buf[n] = '\0';
    p = buf;
    out[o++] = '/';
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *seg = p;
        while (*p && *p != '/')
            p++;
        size_t sl = (size_t)(p - seg);
        if (sl == 1 && seg[0] == '.')
            continue;
        if (sl == 2 && seg[0] == '.' && seg[1] == '.') {
            /* back up to the previous '/' (never above the root) */
            if (o > 1) {
                o--; /* drop trailing '/' */
                while (o > 1 && out[o - 1] != '/')
                    o--;
            }
            continue;
        }
        memmove(out + o, seg, sl);
        o += sl;
        out[o++] = '/';
    }
    if (o > 1 && out[o - 1] == '/')
        o--;
    out[o] = '\0';
}

int agent_path_resolve(const char *path, const char *home, const char *workdir, char *out,
                       size_t outlen, struct al_error *err)
{
    char tmp[PATH_MAX * 2];
    if (!path)
        path = "";
    if (strlen(path) >= PATH_MAX)
        return al_error_set(err, -ENAMETOOLONG, "path is longer than %d bytes", PATH_MAX - 1);
    if (!*path && workdir && *workdir)
        path = workdir;
    if (path[0] == '~') {
        if (path[1] && path[1] != '/' && path[1] != '\\')
            return al_error_set(err, -EINVAL,
                                "cannot expand '%.64s': only '~' and '~/...' (the user's own home) "
                                "are supported",
                                path);
        snprintf(tmp, sizeof tmp, "%s/%s", home, path + 1);
    } else if (path[0] == '/') {
        snprintf(tmp, sizeof tmp, "%s", path);
    } else {
        snprintf(tmp, sizeof tmp, "%s/%s", home, path);
    }
    agent_path_clean(tmp);
    if (strlen(tmp) >= outlen || strlen(tmp) >= PATH_MAX)
        return al_error_set(err, -ENAMETOOLONG, "resolved path is longer than %d bytes",
                            PATH_MAX - 1);
    strcpy(out, tmp);
    return 0;
}

const char *agent_path_base(const char *path)
{
    const char *s = strrchr(path, '/');
    if (!s)
        return path;
    if (s[1] == '\0')
        return s == path ? "/" : s + 1;
    return s + 1;
}

void agent_path_dir(const char *path, char *out, size_t outlen)
{
    const char *s = strrchr(path, '/');
    if (!s || s == path) {
        snprintf(out, outlen, "/");
        return;
    }
    snprintf(out, outlen, "%.*s", (int)(s - path), path);
}

int agent_path_rel(const char *parent, const char *child, char *out, size_t outlen)
{
    size_t pl = strlen(parent);
    if (strcmp(parent, "/") == 0)
        pl = 0;
    if (strncmp(parent, child, pl) != 0 || (child[pl] != '/' && child[pl] != '\0'))
        return -EINVAL;
    const char *rel = child[pl] == '/' ? child + pl + 1 : child + pl;
    if (!*rel)
        rel = ".";
    if (strlen(rel) >= outlen)
        return -ENAMETOOLONG;
    strcpy(out, rel);
    return 0;
}

void agent_go_mode_string(mode_t mode, char *out, size_t outlen)
{
    /* Go: type letters "dalTLDpSugct?" in bit order, then rwxrwxrwx. */
    char b[32];
    size_t w = 0;
    switch (mode & S_IFMT) {
    case S_IFDIR:
        b[w++] = 'd';
        break;
    case S_IFLNK:
        b[w++] = 'L';
        break;
    case S_IFBLK:
        b[w++] = 'D';
        break;
    case S_IFCHR:
        b[w++] = 'D';
        break;
    case S_IFIFO:
        b[w++] = 'p';
        break;
    case S_IFSOCK:
        b[w++] = 'S';
        break;
    default:
        break;
    }
    if (mode & S_ISUID)
        b[w++] = 'u';
    if (mode & S_ISGID)
        b[w++] = 'g';
    if ((mode & S_IFMT) == S_IFCHR)
        b[w++] = 'c';
    if (mode & S_ISVTX)
        b[w++] = 't';
    if (w == 0)
        b[w++] = '-';
    static const char rwx[] = "rwxrwxrwx";
    for (int i = 0; i < 9; i++)
        b[w++] = (mode & (1u << (8 - i))) ? rwx[i] : '-';
    b[w] = '\0';
    snprintf(out, outlen, "%s", b);
}
