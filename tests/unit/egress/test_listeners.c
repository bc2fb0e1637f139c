/* tests/unit/egress/test_listeners: the listener layouts of an egress instance.
 * reuseport: one SO_REUSEPORT socket per worker per address; shared: one plain socket per
 * address that every worker polls (what kernels before 6.5 need behind the vswitch), and
 * connections to it are all accepted, whichever worker wins; auto: chosen by the kernel
 * and the vswitch mode. Needs CAP_NET_ADMIN (IP_TRANSPARENT), as the daemon does, and
 * CAP_SYS_ADMIN: each test runs in a network namespace of its own (fixed ports on its
 * loopback, nobody else's sockets in the way). */
#include "al_test.h"
#include "egress/egress.h"
#include "egress/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

static char tmpdir[64];

/* A network namespace for this test process (Check forks one per test), loopback up. */
static void own_netns(void)
{
    ck_assert_msg(unshare(CLONE_NEWNET) == 0, "unshare(CLONE_NEWNET): %s (run as root)",
                  strerror(errno));
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    ck_assert_int_eq(ioctl(fd, SIOCGIFFLAGS, &ifr), 0);
    ifr.ifr_flags |= IFF_UP;
    ck_assert_int_eq(ioctl(fd, SIOCSIFFLAGS, &ifr), 0);
    close(fd);
}

static void mk(struct egress_config *c, const char *mode, const char *vswitch)
{
    al_test_tmpdir(tmpdir, sizeof tmpdir, "test-listeners");
    char *argv[] = {"airlock-egress",
                    "--state-dir",
                    tmpdir,
                    "--listen",
                    "127.0.0.1:15001",
                    "--dns",
                    "127.0.0.1:15053",
                    "--resolver",
                    "127.0.0.1:9",
                    "--workers",
                    "3",
                    "--admin-socket",
                    "none",
                    "--vault-socket",
                    "none",
                    "--vswitch",
                    (char *)vswitch,
                    "--listener-mode",
                    (char *)mode};
    struct al_error err = {0};
    egress_config_defaults(c);
    ck_assert_int_eq(egress_config_parse_args(c, (int)(sizeof argv / sizeof argv[0]), argv, &err),
                     0);
    ck_assert_int_eq(egress_config_finish(c, &err), 0);
}

static void rmtree(void)
{
    ck_assert_int_eq(al_test_rmtree(tmpdir), 0);
}

static int reuseport_of(int fd)
{
    int v = -1;
    socklen_t l = sizeof v;
    ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &v, &l), 0);
    return v;
}

static struct egress *open_ok(const struct egress_config *c)
{
    struct egress *e = NULL;
    struct al_error err = {0};
    ck_assert_msg(egress_new(c, &e, &err) == 0, "egress_new: %s", al_error_str(&err));
    return e;
}

START_TEST(shared_one_plain_socket_per_address)
{
    struct egress_config c;
    mk(&c, "shared", "off");
    struct egress *e = open_ok(&c);
    ck_assert_int_eq(egress_listener_mode(e), EGRESS_LISTENER_SHARED);
    int fds[64];
    for (int kind = 0; kind < 3; kind++) {
        ck_assert_uint_eq(egress_listener_fds(e, kind, 0, fds, 64), 1);
        ck_assert_int_eq(reuseport_of(fds[0]), 0);
    }
    egress_free(e);
    rmtree();
}
END_TEST

START_TEST(reuseport_one_socket_per_worker)
{
    struct egress_config c;
    mk(&c, "reuseport", "off");
    struct egress *e = open_ok(&c);
    ck_assert_int_eq(egress_listener_mode(e), EGRESS_LISTENER_REUSEPORT);
    int fds[64];
    for (int kind = 0; kind < 3; kind++) {
        ck_assert_uint_eq(egress_listener_fds(e, kind, 0, fds, 64), 3);
        for (int i = 0; i < 3; i++)
            ck_assert_int_eq(reuseport_of(fds[i]), 1);
    }
    egress_free(e);
    rmtree();
}
END_TEST

/* Every worker polls the one socket: each connection is accepted by one of them (here it is
 * then closed, since no sandbox owns 127.0.0.1), none is left waiting in the backlog. */
START_TEST(shared_socket_serves_every_connection)
{
    struct egress_config c;
    mk(&c, "shared", "off");
    struct egress *e = open_ok(&c);
    struct al_error err = {0};
    ck_assert_msg(egress_start(e, &err) == 0, "egress_start: %s", al_error_str(&err));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(egress_tcp_port(e, 0))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    enum { N = 24 };
    int s[N];
    for (int i = 0; i < N; i++) {
        s[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(s[i], 0);
        ck_assert_int_eq(connect(s[i], (struct sockaddr *)&a, sizeof a), 0);
    }
    /* A connection nobody accepts stays open (in the backlog) and never reads EOF. */
    for (int i = 0; i < N; i++) {
        struct pollfd p = {.fd = s[i], .events = POLLIN};
        ck_assert_msg(poll(&p, 1, 10000) == 1, "connection %d was not accepted", i);
        char b[64];
        ssize_t n = recv(s[i], b, sizeof b, 0);
        ck_assert_msg(n >= 0 || errno == ECONNRESET, "connection %d: %s", i, strerror(errno));
        close(s[i]);
    }
    egress_stop(e);
    egress_free(e);
    rmtree();
}
END_TEST

START_TEST(auto_follows_kernel_and_vswitch)
{
    struct egress_config c;
    char why[256];
    mk(&c, "auto", "off");
    ck_assert_int_eq(egress_listener_mode_pick(&c, why, sizeof why), EGRESS_LISTENER_REUSEPORT);
    ck_assert_ptr_nonnull(strstr(why, "--vswitch off"));
    rmtree();
    mk(&c, "auto", "auto");
    struct utsname u;
    ck_assert_int_eq(uname(&u), 0);
    int maj = 0, min = 0;
    ck_assert_int_eq(sscanf(u.release, "%d.%d", &maj, &min), 2);
    bool newer = maj > 6 || (maj == 6 && min >= 5);
    ck_assert_int_eq(egress_listener_mode_pick(&c, why, sizeof why),
                     newer ? EGRESS_LISTENER_REUSEPORT : EGRESS_LISTENER_SHARED);
    ck_assert_ptr_nonnull(strstr(why, u.release));
    ck_assert_ptr_nonnull(strstr(why, newer ? ">= 6.5" : "< 6.5"));
    rmtree();
    mk(&c, "shared", "on");
    ck_assert_int_eq(egress_listener_mode_pick(&c, why, sizeof why), EGRESS_LISTENER_SHARED);
    ck_assert_str_eq(why, "--listener-mode shared");
    rmtree();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("listeners");
    TCase *t = tcase_create("listeners");
    tcase_set_timeout(t, 60);
    tcase_add_checked_fixture(t, own_netns, NULL);
    tcase_add_test(t, shared_one_plain_socket_per_address);
    tcase_add_test(t, reuseport_one_socket_per_worker);
    tcase_add_test(t, shared_socket_serves_every_connection);
    tcase_add_test(t, auto_follows_kernel_and_vswitch);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
