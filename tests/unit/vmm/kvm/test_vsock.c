/* Unit tests: virtio-vsock's host-initiated connections against a guest that never answers
 * (a fake VM, no /dev/kvm: the device loop runs in its thread, the test plays the guest's
 * driver). A REQUEST the guest neither accepts nor refuses is reset at its deadline, so the
 * host client sees its connection end; while the VM is paused the deadline moves on (a
 * paused guest cannot answer), and the reset comes once it runs again.
 * Waits are for conditions, each bounded generously (30 s); none asserts a duration. */
#include "al_test.h"
#include "vq_driver.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "vmm/kvm/virtq.h"

#define MEM        0x10000u
#define QSZ        8
#define Q(i)       (0x1000ull + (i)*0x1000ull) /* descriptors; avail +0x400, used +0x800 */
#define RXBUF(i)   (0x8000ull + (i)*0x100ull)
#define HDR_LEN    44
#define OP_AT      30 /* struct vsock_hdr: cids 16, ports 8, len 4, type 2, then op */
#define OP_REQUEST 1
#define OP_RST     3
#define BOUND_NS   (30ull * 1000000000ull)

static struct vmm_kvm *vm;
static struct virtio_dev *dev;
static char path[108];

static void setup(void)
{
    vm = vqd_fake_vm(MEM);
    vm->cfg.guest_cid = 3;
    snprintf(path, sizeof path, "/tmp/al-test-vsock-%d.sock", (int)getpid());
    unlink(path);
    vm->cfg.vsock[0] = (struct vmm_kvm_vsock_port){.port = 1024, .path = path};
    vm->cfg.n_vsock = 1;
    struct al_error err = {0};
    dev = kvm_vsock_create(vm, 0, 7, &err);
    ck_assert_msg(dev, "kvm_vsock_create: %s", al_error_str(&err));
    for (int qi = 0; qi < 3; qi++)
        ck_assert_uint_eq(vqd_setup(dev, qi, QSZ, Q(qi), Q(qi) + 0x400, Q(qi) + 0x800, 0) & 4, 4);
    /* Receive buffers for the device's packets to the guest. */
    for (uint16_t i = 0; i < QSZ; i++) {
        vqd_desc(vm, Q(0), i, RXBUF(i), 0x100, VIRTQ_DESC_F_WRITE, 0);
        vqd_avail(vm, Q(0) + 0x400, QSZ, i);
    }
    ck_assert_int_eq(kvm_evloop_start(&vm->loop), 0);
}

static void teardown(void)
{
    kvm_evloop_stop(&vm->loop);
    kvm_vsock_destroy(dev);
    vqd_free_vm(vm);
    unlink(path);
}

/* The ops of the packets the device gave the guest so far (up to max). */
static int guest_ops(uint16_t *ops, int max)
{
    pthread_mutex_lock(&dev->lock);
    int n = vqd_used_idx(vm, Q(0) + 0x800);
    for (int i = 0; i < n && i < max; i++) {
        uint32_t id, len;
        vqd_used_elem(vm, Q(0) + 0x800, QSZ, (uint16_t)i, &id, &len);
        ck_assert_uint_ge(len, HDR_LEN);
        memcpy(&ops[i], (uint8_t *)kvm_gm_ptr(&vm->gm, RXBUF(id), HDR_LEN) + OP_AT, 2);
    }
    pthread_mutex_unlock(&dev->lock);
    return n;
}

static int wait_guest_packets(int want, uint16_t *ops)
{
    uint64_t end = al_now_ns() + BOUND_NS;
    int n;
    while ((n = guest_ops(ops, QSZ)) < want && al_now_ns() < end)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    return n;
}

static int connect_host(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* True when the host side of the connection has ended (EOF or reset). */
static bool ended(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) <= 0)
        return false;
    char b;
    ssize_t r = read(fd, &b, 1);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

START_TEST(unanswered_request_is_reset)
{
    int fd = connect_host();
    uint16_t ops[QSZ];
    ck_assert_int_ge(wait_guest_packets(1, ops), 1);
    ck_assert_uint_eq(ops[0], OP_REQUEST);
    /* The guest never answers: at the deadline the host socket is closed... */
    ck_assert_msg(ended(fd, (int)(BOUND_NS / 1000000)),
                  "the host connection was not ended while the guest left its request unanswered");
    /* ... and the guest is told (RST), so that a late answer finds no connection. */
    ck_assert_int_ge(wait_guest_packets(2, ops), 2);
    ck_assert_uint_eq(ops[1], OP_RST);
    close(fd);
}
END_TEST

START_TEST(paused_vm_deadline_moves_on)
{
    __atomic_store_n(&vm->paused, 1, __ATOMIC_RELEASE);
    uint64_t t0 = al_now_ns();
    int fd = connect_host();
    uint16_t ops[QSZ];
    ck_assert_int_ge(wait_guest_packets(1, ops), 1);
    ck_assert_uint_eq(ops[0], OP_REQUEST);
    /* Well past the deadline (2 s) the paused VM's request still stands. */
    while (al_now_ns() < t0 + 4000000000ull)
        ck_assert_msg(!ended(fd, 100), "the request of a paused VM was reset");
    ck_assert_int_eq(guest_ops(ops, QSZ), 1);
    /* Running again, the guest still does not answer: the reset follows. */
    __atomic_store_n(&vm->paused, 0, __ATOMIC_RELEASE);
    ck_assert_msg(ended(fd, (int)(BOUND_NS / 1000000)),
                  "the host connection was not ended once the VM ran again");
    ck_assert_int_ge(wait_guest_packets(2, ops), 2);
    ck_assert_uint_eq(ops[1], OP_RST);
    close(fd);
}
END_TEST

static Suite *vsock_suite(void)
{
    Suite *s = suite_create("vmm_kvm_vsock");
    TCase *tc = tcase_create("connect_deadline");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, unanswered_request_is_reset);
    tcase_add_test(tc, paused_vm_deadline_moves_on);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(vsock_suite)
