/* vmm/kvm/virtq: split virtqueues, device side (see virtq.h for the rules enforced). */
#include "vmm/kvm/virtq.h"

#include <errno.h>
#include <string.h>

static inline uint16_t virtq__load16(volatile const uint16_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

void kvm_virtq_reset(struct virtq *q)
{
    memset(q, 0, sizeof *q);
}

int kvm_virtq_activate(struct virtq *q, const struct guest_mem *gm)
{
    uint64_t n = q->size;
    q->desc = NULL;
    q->avail = NULL;
    q->used = NULL;
    if (n == 0 || n > VIRTQ_MAX_SIZE || (n & (n - 1)))
        return -EINVAL;
    /* Alignments from the spec: descriptors 16, available ring 2, used ring 4. */
    if ((q->desc_gpa & 15) || (q->avail_gpa & 1) || (q->used_gpa & 3))
        return -EINVAL;
    void *d = kvm_gm_ptr(gm, q->desc_gpa, 16 * n);
    void *a = kvm_gm_ptr(gm, q->avail_gpa, 6 + 2 * n); /* flags, idx, ring, used_event */
    void *u = kvm_gm_ptr(gm, q->used_gpa, 6 + 8 * n);  /* flags, idx, ring, avail_event */
    if (!d || !a || !u)
        return -EINVAL;
    q->desc = d;
    q->avail = a;
    q->used = u;
    q->broken = false;
    return 0;
}

bool kvm_virtq_has_avail(const struct virtq *q)
{
    if (!q->ready || q->broken || !q->avail)
        return false;
    return virtq__load16(&q->avail[1]) != q->last_avail;
}

void kvm_virtq_unpop(struct virtq *q)
{
    q->last_avail--;
}

void kvm_virtq_push(struct virtq *q, uint16_t head, uint32_t len)
{
    if (!q->used)
        return;
    uint16_t slot = q->used_idx & (q->size - 1);
    volatile uint32_t *elem = (volatile uint32_t *)(q->used + 4 + 8 * (uint64_t)slot);
    elem[0] = head;
    elem[1] = len;
    q->used_idx++;
    /* The element must be visible before the index that publishes it. */
    __atomic_store_n((volatile uint16_t *)(q->used + 2), q->used_idx, __ATOMIC_RELEASE);
}

bool kvm_virtq_should_notify(const struct virtq *q)
{
    if (!q->avail)
        return false;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return !(virtq__load16(&q->avail[0]) & VIRTQ_AVAIL_F_NO_INTERRUPT);
}

int kvm_virtq_pop(struct virtq *q, const struct guest_mem *gm, struct virtq_chain *c)
{
    if (!q->ready || !q->desc)
        return 0;
    if (q->broken)
        return -EIO;
    uint16_t avail_idx = virtq__load16(&q->avail[1]);
    uint16_t pending = (uint16_t)(avail_idx - q->last_avail);
    if (pending == 0)
        return 0;
    if (pending > q->size) {
        /* The driver claims more buffers than the ring holds: it is lying or broken. */
        q->broken = true;
        return -EIO;
    }
    uint16_t head = virtq__load16(&q->avail[2 + (q->last_avail & (q->size - 1))]);
    q->last_avail++;

    c->head = head;
    c->n_out = c->n_in = 0;
    c->out_len = c->in_len = 0;
    if (head >= q->size)
        goto bad_head; /* nothing to give back: head is not a valid id */

    uint16_t idx = head;
    unsigned visited = 0;
    for (;;) {
        if (++visited > q->size || c->n_out + c->n_in >= VIRTQ_MAX_SEGS)
            goto bad; /* a loop, or longer than we accept */
        struct virtq_desc d;
        /* One copy: the guest may rewrite the descriptor while we look at it. */
        d.addr = q->desc[idx].addr;
        d.len = q->desc[idx].len;
        d.flags = q->desc[idx].flags;
        d.next = q->desc[idx].next;
        if (d.flags & VIRTQ_DESC_F_INDIRECT)
            goto bad;
        uint8_t *p = kvm_gm_ptr(gm, d.addr, d.len);
        if (!p)
            goto bad;
        struct virtq_seg *s = &c->seg[c->n_out + c->n_in];
        s->p = p;
        s->len = d.len;
        if (d.flags & VIRTQ_DESC_F_WRITE) {
            c->n_in++;
            c->in_len += d.len;
        } else {
            if (c->n_in)
                goto bad; /* readable after writable */
            c->n_out++;
            c->out_len += d.len;
        }
        if (!(d.flags & VIRTQ_DESC_F_NEXT))
            break;
        if (d.next >= q->size)
            goto bad;
        idx = d.next;
    }
    return 1;

bad:
    kvm_virtq_push(q, head, 0);
bad_head:
    c->n_out = c->n_in = 0;
    c->out_len = c->in_len = 0;
    return -EINVAL;
}

uint64_t kvm_virtq_chain_read(const struct virtq_chain *c, uint64_t off, void *dst, uint64_t len)
{
    uint64_t done = 0;
    for (unsigned i = 0; i < c->n_out && done < len; i++) {
        const struct virtq_seg *s = &c->seg[i];
        if (off >= s->len) {
            off -= s->len;
            continue;
        }
        uint64_t n = s->len - off;
        if (n > len - done)
            n = len - done;
        memcpy((uint8_t *)dst + done, s->p + off, n);
        done += n;
        off = 0;
    }
    return done;
}

uint64_t kvm_virtq_chain_write(const struct virtq_chain *c, uint64_t off, const void *src,
                               uint64_t len)
{
    uint64_t done = 0;
    for (unsigned i = c->n_out; i < (unsigned)c->n_out + c->n_in && done < len; i++) {
        const struct virtq_seg *s = &c->seg[i];
        if (off >= s->len) {
            off -= s->len;
            continue;
        }
        uint64_t n = s->len - off;
        if (n > len - done)
            n = len - done;
        memcpy(s->p + off, (const uint8_t *)src + done, n);
        done += n;
        off = 0;
    }
    return done;
}
