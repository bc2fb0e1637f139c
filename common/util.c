/* common/util: see util.h. */
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/openat2.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sodium.h>
#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#endif

uint64_t al_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t al_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's civil_from_days):
 * arithmetic only, so the formatter needs no time-zone data, takes no lock and answers the
 * same in every libc, the static musl agent's included. */
static void util__civil(int64_t days, int *year, int *month, int *day)
{
    days += 719468; /* from 0000-03-01, so that the leap day ends each 400-year era */
    int64_t era = (days >= 0 ? days : days - 146096) / 146097;
    unsigned doe = (unsigned)(days - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *day = (int)(doy - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
    *year = (int)((int64_t)yoe + era * 400 + (*month <= 2));
}

/* v (< 10^digits) as zero-padded decimal, two digits per step: this runs for every audit
 * record and log line. */
static char *util__num(char *p, unsigned v, int digits)
{
    static const char pairs[201] = "00010203040506070809101112131415161718192021222324"
                                   "25262728293031323334353637383940414243444546474849"
                                   "50515253545556575859606162636465666768697071727374"
                                   "75767778798081828384858687888990919293949596979899";
    int i = digits;
    for (; i >= 2; v /= 100) {
        i -= 2;
        memcpy(p + i, pairs + 2 * (v % 100), 2);
    }
    if (i)
        p[0] = (char)('0' + v);
    return p + digits;
}

int al_time_format(char *out, size_t outlen, int64_t sec, long nsec, enum al_time_form form)
{
    /* 0000-01-01T00:00:00Z .. 9999-12-31T23:59:59Z: four-digit years only (RFC 3339). */
    static const int64_t min_s = -62167219200LL, max_s = 253402300799LL;
    static const char wday[7][4] = {"Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"};
    static const char mon[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    char buf[AL_TIME_FORMAT_MAX], *start = outlen >= sizeof buf ? out : buf, *p = start;
    int rc = 0;
    if (nsec < 0 || nsec > 999999999L || (unsigned)form > AL_TIME_HTTP)
        rc = -EINVAL;
    else if (sec < min_s || sec > max_s)
        rc = -ERANGE;
    if (rc) {
        if (outlen)
            out[0] = '\0';
        return rc;
    }
    int64_t days = (sec >= 0 ? sec : sec - 86399) / 86400;
    unsigned tod = (unsigned)(sec - days * 86400);
    int y, m, d;
    util__civil(days, &y, &m, &d);
    unsigned hh = tod / 3600, mm = tod / 60 % 60, ss = tod % 60, ns = (unsigned)nsec;
    switch (form) {
    case AL_TIME_HTTP:
        memcpy(p, wday[(days % 7 + 7) % 7], 3);
        memcpy(p + 3, ", ", 2);
        p = util__num(p + 5, (unsigned)d, 2);
        *p++ = ' ';
        memcpy(p, mon[m - 1], 3);
        p[3] = ' ';
        p = util__num(p + 4, (unsigned)y, 4);
        *p++ = ' ';
        p = util__num(p, hh, 2);
        *p++ = ':';
        p = util__num(p, mm, 2);
        *p++ = ':';
        p = util__num(p, ss, 2);
        memcpy(p, " GMT", 4);
        p += 4;
        break;
    case AL_TIME_BASIC:
    case AL_TIME_ASN1:
        p = util__num(p, (unsigned)y, 4);
        p = util__num(p, (unsigned)m, 2);
        p = util__num(p, (unsigned)d, 2);
        if (form == AL_TIME_BASIC)
            *p++ = 'T';
        p = util__num(p, hh * 10000 + mm * 100 + ss, 6);
        if (form == AL_TIME_BASIC)
            *p++ = 'Z';
        break;
    default: {
        p = util__num(p, (unsigned)y, 4);
        *p++ = '-';
        p = util__num(p, (unsigned)m, 2);
        *p++ = '-';
        p = util__num(p, (unsigned)d, 2);
        *p++ = 'T';
        p = util__num(p, hh, 2);
        *p++ = ':';
        p = util__num(p, mm, 2);
        *p++ = ':';
        p = util__num(p, ss, 2);
        int digits = form == AL_TIME_RFC3339_MS   ? 3
                     : form == AL_TIME_RFC3339_US ? 6
                     : form == AL_TIME_RFC3339_NS ? 9
                                                  : 0;
        if (form == AL_TIME_RFC3339_EXACT && ns)
            digits = ns % 1000000 == 0 ? 3 : ns % 1000 == 0 ? 6 : 9;
        if (digits) {
            *p++ = '.';
            p = util__num(p, digits == 3 ? ns / 1000000 : digits == 6 ? ns / 1000 : ns, digits);
        }
        *p++ = 'Z';
    }
    }
    size_t n = (size_t)(p - start);
    if (n >= outlen) {
        if (outlen)
            out[0] = '\0';
        return -E2BIG;
    }
    if (start == buf)
        memcpy(out, buf, n);
    out[n] = '\0';
    return (int)n;
}

void al_time_rfc3339(char *out, size_t outlen, uint64_t wall_ns)
{
    al_time_format(out, outlen, (int64_t)(wall_ns / 1000000000ull), (long)(wall_ns % 1000000000ull),
                   AL_TIME_RFC3339_MS);
}

static int util__digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)**p))
            return -EINVAL;
        v = v * 10 + (**p - '0');
        (*p)++;
    }
    *out = v;
    return 0;
}

int al_time_parse_rfc3339(const char *s, uint64_t *wall_ns)
{
    int Y, M, D, h = 0, m = 0, sec = 0;
    const char *p = s;
    if (util__digits(&p, 4, &Y) || *p++ != '-' || util__digits(&p, 2, &M) || *p++ != '-' ||
        util__digits(&p, 2, &D))
        return -EINVAL;
    uint64_t frac_ns = 0;
    long off = 0;
    if (*p == 'T' || *p == 't' || *p == ' ') {
        p++;
        if (util__digits(&p, 2, &h) || *p++ != ':' || util__digits(&p, 2, &m) || *p++ != ':' ||
            util__digits(&p, 2, &sec))
            return -EINVAL;
        if (*p == '.') {
            p++;
            uint64_t scale = 100000000ull;
            if (!isdigit((unsigned char)*p))
                return -EINVAL;
            while (isdigit((unsigned char)*p)) {
                frac_ns += (uint64_t)(*p - '0') * scale;
                scale /= 10;
                p++;
            }
        }
        if (*p == 'Z' || *p == 'z') {
            p++;
        } else if (*p == '+' || *p == '-') {
            int sign = *p++ == '-' ? -1 : 1, oh, om;
            if (util__digits(&p, 2, &oh) || *p++ != ':' || util__digits(&p, 2, &om))
                return -EINVAL;
            off = sign * (oh * 3600L + om * 60L);
        } else {
            return -EINVAL;
        }
    }
    if (*p)
        return -EINVAL;
    if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
        return -EINVAL;
    struct tm tm = {.tm_year = Y - 1900,
                    .tm_mon = M - 1,
                    .tm_mday = D,
                    .tm_hour = h,
                    .tm_min = m,
                    .tm_sec = sec};
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || t - off < 0)
        return -EINVAL;
    *wall_ns = (uint64_t)(t - off) * 1000000000ull + frac_ns;
    return 0;
}

int al_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int al_read_all(int fd, void *data, size_t len)
{
    char *p = data;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EPIPE;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int al_read_fd(int fd, const char *path, size_t max, char **out, size_t *len, struct al_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return al_error_set(err, -errno, "cannot stat %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return al_error_set(err, -EISDIR, "%s is a directory, expected a file", path);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return al_error_set(err, -ENOMEM, "out of memory reading %s", path);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max + 1) {
                free(buf);
                return al_error_set(err, -EFBIG, "%s is larger than the limit of %zu bytes", path,
                                    max);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return al_error_set(err, -ENOMEM, "out of memory reading %s", path);
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            return al_error_set(err, -e, "cannot read %s: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max) {
            free(buf);
            return al_error_set(err, -EFBIG, "%s is larger than the limit of %zu bytes", path, max);
        }
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return 0;
}

int al_read_file(const char *path, size_t max, char **out, size_t *len, struct al_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
    int rc = al_read_fd(fd, path, max, out, len, err);
    close(fd);
    return rc;
}

int al_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int al_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode,
                         struct al_error *err)
{
    char dir[PATH_MAX], tmp[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return al_error_set(err, -ENAMETOOLONG, "path too long: %s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    char rnd[17];
    al_random_hex(rnd, 8);
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%s", path, rnd) >= (int)sizeof tmp)
        return al_error_set(err, -ENAMETOOLONG, "path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot create %s: %s", tmp, strerror(errno));
    int rc = al_write_all(fd, data, len);
    if (rc == 0 && fchmod(fd, mode) < 0)
        rc = -errno;
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return al_error_set(err, rc, "cannot write %s: %s (the old content is unchanged)", path,
                            strerror(-rc));
    }
    rc = al_fsync_dir(dir);
    if (rc)
        return al_error_set(err, rc, "cannot sync directory %s: %s", dir, strerror(-rc));
    return 0;
}

int al_key_file(const char *path, void *key, size_t len, bool create, struct al_error *err)
{
    char *data = NULL;
    size_t got = 0;
    struct al_error rerr = {0};
    int rc = al_read_file(path, len + 1, &data, &got, &rerr);
    if (rc == 0) {
        bool ok = got == len;
        if (ok)
            memcpy(key, data, len);
        sodium_memzero(data, got);
        free(data);
        if (!ok)
            return al_error_set(err, -EINVAL, "%s is not a key of %zu bytes (it holds %s%zu)", path,
                                len, got > len ? "more than " : "", got > len ? len : got);
        return 0;
    }
    if (rc == -EFBIG)
        return al_error_set(err, -EINVAL, "%s is not a key of %zu bytes (it holds more)", path,
                            len);
    if (rc != -ENOENT || !create)
        return al_error_set(err, rc, "%s", al_error_str(&rerr));
    randombytes_buf(key, len);
    rc = al_write_file_atomic(path, key, len, 0600, err);
    if (rc) {
        sodium_memzero(key, len);
        return rc;
    }
    return 1;
}

int al_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(buf, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int al_set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

int al_fd_table_reserve(unsigned n)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) < 0)
        return -errno;
    if (r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &r) < 0 && getrlimit(RLIMIT_NOFILE, &r) < 0)
            return -errno;
    }
    if (r.rlim_cur != RLIM_INFINITY && n > r.rlim_cur)
        n = (unsigned)r.rlim_cur;
    if (n < 2 || n > INT_MAX)
        return -EINVAL;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    /* The first free descriptor at or above n - 1 is n - 1 itself unless it is taken, and
     * a taken one means the table holds it already. */
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, (int)n - 1);
    int rc = hi < 0 && errno != EMFILE ? -errno : 0;
    if (hi >= 0)
        close(hi);
    close(fd);
    return rc ? rc : (int)n;
}

int al_set_cloexec(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFD);
    if (fl < 0)
        return -errno;
    fl = on ? (fl | FD_CLOEXEC) : (fl & ~FD_CLOEXEC);
    return fcntl(fd, F_SETFD, fl) < 0 ? -errno : 0;
}

int al_parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -ERANGE;
    static const struct {
        const char *suffix;
        uint64_t mul;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"k", 1000},
                 {"K", 1000},
                 {"kB", 1000},
                 {"KB", 1000},
                 {"KiB", 1024},
                 {"M", 1000000},
                 {"MB", 1000000},
                 {"MiB", 1048576},
                 {"G", 1000000000ull},
                 {"GB", 1000000000ull},
                 {"GiB", 1073741824ull},
                 {"T", 1000000000000ull},
                 {"TiB", 1099511627776ull}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            if (v > UINT64_MAX / units[i].mul)
                return -ERANGE;
            *out = v * units[i].mul;
            return 0;
        }
    }
    return -EINVAL;
}

int al_parse_duration_ms(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -ERANGE;
    uint64_t mul;
    if (strcmp(end, "ms") == 0)
        mul = 1;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        mul = 1000;
    else if (strcmp(end, "m") == 0)
        mul = 60000;
    else if (strcmp(end, "h") == 0)
        mul = 3600000;
    else if (strcmp(end, "d") == 0)
        mul = 86400000;
    else
        return -EINVAL;
    if (v > UINT64_MAX / mul)
        return -ERANGE;
    *out = v * mul;
    return 0;
}

const char al_hex_lower[17] = "0123456789abcdef", al_hex_upper[17] = "0123456789ABCDEF";

void al_hex_encode(char *out, const void *in, size_t n, bool upper)
{
    const unsigned char *b = in;
    size_t i = 0;
#if defined(__SSE2__) && defined(__x86_64__)
    /* 16 bytes at a time: each nibble plus '0', plus the gap to 'a' (or 'A') above 9. */
    const __m128i low = _mm_set1_epi8(0x0f), nine = _mm_set1_epi8(9);
    const __m128i zero = _mm_set1_epi8('0'),
                  gap = _mm_set1_epi8((char)((upper ? 'A' : 'a') - '0' - 10));
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(b + i));
        __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low), lo = _mm_and_si128(v, low);
        hi = _mm_add_epi8(_mm_add_epi8(hi, zero), _mm_and_si128(_mm_cmpgt_epi8(hi, nine), gap));
        lo = _mm_add_epi8(_mm_add_epi8(lo, zero), _mm_and_si128(_mm_cmpgt_epi8(lo, nine), gap));
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i), _mm_unpacklo_epi8(hi, lo));
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i + 16), _mm_unpackhi_epi8(hi, lo));
    }
#endif
    const char *d = upper ? al_hex_upper : al_hex_lower;
    for (; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = '\0';
}

int al_hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool al_hex_is_lower(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

void al_random_hex(char *out, size_t nbytes)
{
    unsigned char b[64];
    while (nbytes) {
        size_t n = nbytes > sizeof b ? sizeof b : nbytes;
        randombytes_buf(b, n);
        al_hex_encode(out, b, n, false);
        out += 2 * n;
        nbytes -= n;
    }
    *out = '\0';
}

void al_uuid_v4(char out[37])
{
    unsigned char b[16];
    randombytes_buf(b, sizeof b);
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    al_uuid_format(b, out);
}

void al_uuid_format(const unsigned char b[16], char out[37])
{
    const char *hex = al_hex_lower;
    char *o = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        *o++ = hex[b[i] >> 4];
        *o++ = hex[b[i] & 15];
    }
    *o = '\0';
}

int al_openat_beneath(int dirfd, const char *path, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    long fd;
    do {
        fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : (int)fd;
}

static int util__rm_at(int dirfd, const char *name, int depth)
{
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    int unlink_errno = errno;
    if (unlink_errno != EISDIR && unlink_errno != EPERM)
        return -unlink_errno;
    if (depth >= AL_RMTREE_MAX_DEPTH)
        return -ELOOP;
    /* Opened beneath dirfd with no link and no mount crossed: a mount point in the tree
     * (a bind mount left in a sandbox's root, say) is refused with -EXDEV, never emptied
     * through. */
    int fd = al_openat_beneath(dirfd, name, O_RDONLY | O_DIRECTORY);
    if (fd == -ENOENT)
        return 0;
    if (fd == -ENOTDIR)
        return -unlink_errno; /* a file unlinkat may not remove (EPERM) */
    if (fd < 0)
        return fd;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            int r = util__rm_at(fd, e->d_name, depth + 1);
            if (r < 0 && !rc)
                rc = r;
        }
    closedir(d);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && !rc)
        rc = -errno;
    return rc;
}

int al_rmtree_at(int dirfd, const char *name)
{
    return util__rm_at(dirfd, name, 0);
}

int al_rmtree(const char *path)
{
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s", path) >= sizeof dir)
        return -ENAMETOOLONG;
    char *slash = strrchr(dir, '/');
    if (!slash) {
        if (!dir[0])
            return -EINVAL;
        return util__rm_at(AT_FDCWD, dir, 0);
    }
    if (!slash[1])
        return -EINVAL;
    *slash = '\0';
    int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -errno;
    int rc = util__rm_at(dfd, slash + 1, 0);
    close(dfd);
    return rc;
}
