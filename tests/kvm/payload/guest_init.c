/* tests/kvm/payload/guest_init: a tiny static PID 1 for the L2 test guest.
 *
 * Exercises what the VMM offers and reports each check on the serial console as
 *   AIRLOCK-GUEST: ok <check>      or   AIRLOCK-GUEST: FAIL <check>: <why>
 * then "AIRLOCK-GUEST: done <passed>/<total>" and reboots (reboot=k: the i8042 reset line,
 * which the VMM turns into a clean exit). The scenario in L1 reads the console log.
 * The checks it runs are named on the kernel command line (airlock.test=a,b,c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int passed, total;

static void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(1, buf, (size_t)n);
    (void)w;
}

static void result(const char *check, int ok, const char *why)
{
    total++;
    if (ok) {
        passed++;
        say("AIRLOCK-GUEST: ok %s", check);
    } else {
        say("AIRLOCK-GUEST: FAIL %s: %s", check, why);
    }
}

static char cmdline[4096];

static int wants(const char *check)
{
    const char *p = strstr(cmdline, "airlock.test=");
    if (!p)
        return 0;
    p += strlen("airlock.test=");
    size_t n = strlen(check);
    while (*p && *p != ' ' && *p != '\n') {
        if (strncmp(p, check, n) == 0 && (p[n] == ',' || p[n] == ' ' || p[n] == '\n' || !p[n]))
            return 1;
        while (*p && *p != ',' && *p != ' ' && *p != '\n')
            p++;
        if (*p == ',')
            p++;
    }
    return 0;
}

static void check_boot(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    say("AIRLOCK-GUEST: boottime %ld.%03ld", (long)ts.tv_sec, ts.tv_nsec / 1000000);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    char why[64];
    snprintf(why, sizeof why, "%ld CPUs online", ncpu);
    say("AIRLOCK-GUEST: cpus %ld", ncpu);
    result("boot", ncpu >= 1, why);
}

int main(void)
{
    int fd = open("/dev/console", O_RDWR);
    if (fd < 0) {
        mkdir("/dev", 0755);
        mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
        fd = open("/dev/console", O_RDWR);
    }
    if (fd >= 0) {
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
    }
    mkdir("/proc", 0755);
    mount("proc", "/proc", "proc", 0, NULL);
    int cfd = open("/proc/cmdline", O_RDONLY);
    if (cfd >= 0) {
        ssize_t n = read(cfd, cmdline, sizeof cmdline - 1);
        cmdline[n > 0 ? n : 0] = 0;
        close(cfd);
    }
    say("AIRLOCK-GUEST: started");
    if (wants("boot"))
        check_boot();
    say("AIRLOCK-GUEST: done %d/%d", passed, total);
    sync();
    reboot(RB_AUTOBOOT);
    for (;;)
        pause();
}
