/* vmm/kvm/legacy: the PC devices a Linux guest touches besides virtio.
 *
 * Owns: a 16550A UART at 0x3f8/IRQ 4 whose output is the guest console (appended to the
 * console log; no input), the i8042 controller's reset line (command 0xfe on port 0x64
 * ends the VM cleanly: Linux's reboot=k path), a CMOS/RTC that reads as zero so the
 * guest's RTC probing ends at once, and the POST port 0x80. Every register access is
 * bounded by the bus (port range) and keeps all state in this struct.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/log.h"
#include "vmm/kvm/vm.h"

/* ---- 16550A --------------------------------------------------------------------------- */
#define UART_IER_RDI    0x01
#define UART_IER_THRI   0x02
#define UART_LCR_DLAB   0x80
#define UART_MCR_LOOP   0x10
#define UART_LSR_DR     0x01
#define UART_LSR_THRE   0x20
#define UART_LSR_TEMT   0x40
#define UART_IIR_NO_INT 0x01
#define UART_IIR_THRI   0x02
#define UART_FCR_ENABLE 0x01

struct serial {
    struct pio_dev pio;
    struct vmm_kvm *vm;
    pthread_mutex_t lock;
    uint32_t irq;
    int out_fd;
    uint8_t ier, lcr, mcr, lsr_extra, scr, dll, dlm, fcr;
    bool thri_pending;
    int level;
    /* Console output is line-buffered so a log line is one write. */
    char line[512];
    size_t line_len;
};

static void serial__flush(struct serial *s)
{
    if (s->line_len && s->out_fd >= 0) {
        ssize_t w = write(s->out_fd, s->line, s->line_len);
        (void)w; /* a full disk must not stop the guest; the log is best effort */
    }
    s->line_len = 0;
}

static void serial__update_irq(struct serial *s)
{
    int level = (s->ier & UART_IER_THRI) && s->thri_pending;
    if (level != s->level) {
        s->level = level;
        kvm_vm_irq_line(s->vm, s->irq, level);
    }
}

static void serial__out(struct pio_dev *d, uint16_t off, const uint8_t *data, uint32_t size)
{
    struct serial *s = d->ctx;
    uint8_t v = data[0];
    pthread_mutex_lock(&s->lock);
    bool dlab = s->lcr & UART_LCR_DLAB;
    switch (off) {
    case 0:
        if (dlab) {
            s->dll = v;
        } else {
            if (!(s->mcr & UART_MCR_LOOP)) {
                atomic_fetch_add(&s->vm->console_bytes, 1);
                s->line[s->line_len++] = (char)v;
                if (v == '\n' || s->line_len == sizeof s->line)
                    serial__flush(s);
            }
            s->thri_pending = true;
        }
        break;
    case 1:
        if (dlab) {
            s->dlm = v;
        } else {
            uint8_t old = s->ier;
            s->ier = v & 0x0f;
            /* Enabling THRI with an empty transmitter raises it at once. */
            if (!(old & UART_IER_THRI) && (s->ier & UART_IER_THRI))
                s->thri_pending = true;
        }
        break;
    case 2:
        s->fcr = v;
        break;
    case 3:
        s->lcr = v;
        break;
    case 4:
        s->mcr = v & 0x1f;
        break;
    case 7:
        s->scr = v;
        break;
    default:
        break;
    }
    serial__update_irq(s);
    pthread_mutex_unlock(&s->lock);
}

static void serial__in(struct pio_dev *d, uint16_t off, uint8_t *data, uint32_t size)
{
    struct serial *s = d->ctx;
    uint8_t v = 0;
    pthread_mutex_lock(&s->lock);
    bool dlab = s->lcr & UART_LCR_DLAB;
    switch (off) {
    case 0:
        v = dlab ? s->dll : 0; /* no input */
        break;
    case 1:
        v = dlab ? s->dlm : s->ier;
        break;
    case 2:
        if ((s->ier & UART_IER_THRI) && s->thri_pending) {
            v = UART_IIR_THRI;
            s->thri_pending = false; /* reading IIR acknowledges THRI */
        } else {
            v = UART_IIR_NO_INT;
        }
        if (s->fcr & UART_FCR_ENABLE)
            v |= 0xc0;
        break;
    case 3:
        v = s->lcr;
        break;
    case 4:
        v = s->mcr;
        break;
    case 5:
        v = UART_LSR_THRE | UART_LSR_TEMT;
        break;
    case 6:
        if (s->mcr & UART_MCR_LOOP) {
            /* Loopback: RTS->CTS, DTR->DSR, OUT1->RI, OUT2->DCD (8250 autoconfig checks). */
            v = (uint8_t)(((s->mcr & 0x02) << 3) | ((s->mcr & 0x01) << 5) | ((s->mcr & 0x04) << 4) |
                          ((s->mcr & 0x08) << 4));
        } else {
            v = 0xb0; /* DCD, DSR, CTS */
        }
        break;
    case 7:
        v = s->scr;
        break;
    default:
        break;
    }
    serial__update_irq(s);
    pthread_mutex_unlock(&s->lock);
    memset(data, 0, size);
    data[0] = v;
}

struct serial *kvm_serial_new(struct vmm_kvm *vm, uint16_t base, uint32_t irq, int out_fd)
{
    struct serial *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->vm = vm;
    s->irq = irq;
    s->out_fd = out_fd;
    pthread_mutex_init(&s->lock, NULL);
    s->pio =
        (struct pio_dev){.base = base, .len = 8, .in = serial__in, .out = serial__out, .ctx = s};
    kvm_vm_register_pio(vm, &s->pio);
    return s;
}

void kvm_serial_free(struct serial *s)
{
    if (!s)
        return;
    serial__flush(s);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void kvm_serial_save(struct serial *s, struct serial_snap *o)
{
    pthread_mutex_lock(&s->lock);
    *o = (struct serial_snap){s->ier, s->lcr, s->mcr, s->scr,
                              s->dll, s->dlm, s->fcr, s->thri_pending};
    pthread_mutex_unlock(&s->lock);
}

void kvm_serial_load(struct serial *s, const struct serial_snap *in)
{
    pthread_mutex_lock(&s->lock);
    s->ier = in->ier & 0x0f;
    s->lcr = in->lcr;
    s->mcr = in->mcr & 0x1f;
    s->scr = in->scr;
    s->dll = in->dll;
    s->dlm = in->dlm;
    s->fcr = in->fcr;
    s->thri_pending = in->thri_pending != 0;
    s->level = -1; /* force the line to be driven to its restored level */
    serial__update_irq(s);
    pthread_mutex_unlock(&s->lock);
}

/* ---- i8042 (reset only), CMOS, POST ------------------------------------------------------ */
static void i8042__in(struct pio_dev *d, uint16_t off, uint8_t *data, uint32_t size)
{
    memset(data, 0, size); /* status: input and output buffers empty */
}

static void i8042__out(struct pio_dev *d, uint16_t off, const uint8_t *data, uint32_t size)
{
    struct vmm_kvm *vm = d->ctx;
    if (off == 4 && data[0] == 0xfe) { /* port 0x64, "pulse reset line" */
        al_info("guest reset through the i8042 controller");
        kvm_vm_request_exit(vm, VMM_KVM_EXIT_RESET);
    }
}

static void zero__in(struct pio_dev *d, uint16_t off, uint8_t *data, uint32_t size)
{
    memset(data, 0, size);
}

static void ignore__out(struct pio_dev *d, uint16_t off, const uint8_t *data, uint32_t size)
{
}

static struct pio_dev legacy__i8042 = {.base = 0x60, .len = 5, .in = i8042__in, .out = i8042__out};
static struct pio_dev legacy__cmos = {.base = 0x70, .len = 2, .in = zero__in, .out = ignore__out};
static struct pio_dev legacy__post = {.base = 0x80, .len = 1, .in = zero__in, .out = ignore__out};

void kvm_legacy_register(struct vmm_kvm *vm)
{
    /* These have no per-VM state except the VM pointer; one VM per process. */
    legacy__i8042.ctx = vm;
    kvm_vm_register_pio(vm, &legacy__i8042);
    kvm_vm_register_pio(vm, &legacy__cmos);
    kvm_vm_register_pio(vm, &legacy__post);
}
