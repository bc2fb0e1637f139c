/* vmm/kvm/evloop: the device thread's epoll loop.
 *
 * Owns: one thread that waits on every device fd (queue-notify eventfds, the tap, unix
 * sockets of the agent channel) and calls the registered handler; stopped through an
 * eventfd. Handlers run on this thread only, so device back-ends need no locking among
 * themselves (the transport lock still guards state shared with vCPU threads).
 *
 * A handler may remove another handler (or itself) while the rest of the batch that
 * epoll_wait returned is still to be dispatched, and the removed handler's memory may be
 * reused at once (virtio-vsock connection slots): events of handlers removed during the
 * batch are dropped (level-triggered, so a live fd reports again on the next wait).
 *
 * Timers (struct ev_timer) are deadlines the loop waits for as epoll_wait's timeout (no
 * timerfd: nothing the device thread's filter would have to allow); a handler arms one by
 * setting its at_ns, and the loop runs it once that time has passed.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "vmm/kvm/confine.h"
#include "vmm/kvm/vm.h"

int kvm_evloop_init(struct evloop *l)
{
    memset(l, 0, sizeof *l);
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0)
        return -errno;
    l->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->stop_fd < 0) {
        int e = -errno;
        close(l->epfd);
        return e;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->stop_fd, &ev) < 0)
        return -errno;
    return 0;
}

int kvm_evloop_add(struct evloop *l, struct ev_handler *h, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = h};
    return epoll_ctl(l->epfd, EPOLL_CTL_ADD, h->fd, &ev) < 0 ? -errno : 0;
}

int kvm_evloop_mod(struct evloop *l, struct ev_handler *h, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = h};
    return epoll_ctl(l->epfd, EPOLL_CTL_MOD, h->fd, &ev) < 0 ? -errno : 0;
}

/* The loop this thread dispatches, if it is a device thread. */
static __thread struct evloop *evloop__current;

void kvm_evloop_forget(struct evloop *l, struct ev_handler *h)
{
    if (evloop__current == l) {
        if (l->ndead < EVLOOP_MAX_DEAD)
            l->dead[l->ndead++] = h;
        else
            l->dead_overflow = true; /* drop the rest of the batch */
    }
}

void kvm_evloop_del(struct evloop *l, struct ev_handler *h)
{
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, h->fd, NULL);
    kvm_evloop_forget(l, h);
}

int kvm_evloop_timer_add(struct evloop *l, struct ev_timer *t)
{
    if (l->ntimers == EVLOOP_MAX_TIMERS)
        return -ENOSPC;
    l->timers[l->ntimers++] = t;
    return 0;
}

void kvm_evloop_timer_del(struct evloop *l, struct ev_timer *t)
{
    for (int i = 0; i < l->ntimers; i++)
        if (l->timers[i] == t) {
            l->timers[i] = l->timers[--l->ntimers];
            return;
        }
}

/* epoll_wait's timeout for the earliest armed timer (-1: none), running those due. */
static int evloop__timers(struct evloop *l)
{
    uint64_t now = al_now_ns(), next = 0;
    for (int i = 0; i < l->ntimers; i++) {
        struct ev_timer *t = l->timers[i];
        if (t->at_ns && t->at_ns <= now) {
            t->at_ns = 0;
            t->fn(t); /* may arm it again */
            now = al_now_ns();
        }
        if (t->at_ns && (!next || t->at_ns < next))
            next = t->at_ns;
    }
    if (!next)
        return -1;
    uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 0;
    return ms > 60000 ? 60000 : (int)ms;
}

static bool evloop__is_dead(const struct evloop *l, const struct ev_handler *h)
{
    for (int i = 0; i < l->ndead; i++)
        if (l->dead[i] == h)
            return true;
    return false;
}

static void *evloop__thread(void *arg)
{
    struct evloop *l = arg;
    struct epoll_event evs[32];
    pthread_setname_np(pthread_self(), "devices");
    evloop__current = l;
    struct al_error err = {0};
    if (kvm_confine_thread(CONFINE_DEVICES, &err) < 0) {
        al_error("device thread: %s", al_error_str(&err));
        return NULL;
    }
    for (;;) {
        int n = epoll_wait(l->epfd, evs, 32, evloop__timers(l));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            al_error("device loop: epoll_wait: %s", strerror(errno));
            break;
        }
        l->ndead = 0;
        l->dead_overflow = false;
        for (int i = 0; i < n && !l->dead_overflow; i++) {
            struct ev_handler *h = evs[i].data.ptr;
            if (!h)
                return NULL; /* stop_fd */
            if (evloop__is_dead(l, h))
                continue;
            h->fn(h, evs[i].events);
        }
    }
    return NULL;
}

int kvm_evloop_start(struct evloop *l)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, VM_THREAD_STACK);
    int rc = pthread_create(&l->thread, &attr, evloop__thread, l);
    pthread_attr_destroy(&attr);
    if (rc)
        return -rc;
    l->running = true;
    return 0;
}

void kvm_evloop_stop(struct evloop *l)
{
    if (!l->running)
        return;
    uint64_t one = 1;
    ssize_t w = write(l->stop_fd, &one, sizeof one);
    (void)w;
    pthread_join(l->thread, NULL);
    l->running = false;
}

void kvm_evloop_free(struct evloop *l)
{
    kvm_evloop_stop(l);
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->stop_fd >= 0)
        close(l->stop_fd);
    l->epfd = l->stop_fd = -1;
}
