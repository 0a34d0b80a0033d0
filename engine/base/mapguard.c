/* Mapped-file guard: a table of file mappings and a SIGBUS handler that absorbs faults in them. */
#include "engine/base/mapguard.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A slot is free when start == 0.  add claims it with a compare-and-swap on start
 * (after which len is stored), so the handler, which reads without locks, sees either
 * a free slot, a claimed one with len 0 (ignored), or a whole registration. */
typedef struct slot {
    uintptr_t start;
    size_t len;
    int faulted;
} slot;

static slot slots[MAPGUARD_SLOTS];
static unsigned long nfaults;
static struct sigaction previous;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int installed;
static uintptr_t page_mask;

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < MAPGUARD_SLOTS; i++) {
        uintptr_t s = __atomic_load_n(&slots[i].start, __ATOMIC_ACQUIRE);
        size_t n = __atomic_load_n(&slots[i].len, __ATOMIC_ACQUIRE);
        if (s == 0 || n == 0 || a < s || a - s >= n)
            continue;
        void *page = (void *)(a & page_mask);
        /* writable: a write through a guarded mapping (wmap.h) retries on it too */
        if (mmap(page, ~page_mask + 1, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            break;
        __atomic_store_n(&slots[i].faulted, 1, __ATOMIC_RELEASE);
        __atomic_add_fetch(&nfaults, 1, __ATOMIC_RELAXED);
        return;
    }
    /* Not ours: what would have happened without the guard. */
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, si, uctx);
    } else if (previous.sa_handler != SIG_IGN && previous.sa_handler != SIG_DFL) {
        previous.sa_handler(sig);
    } else {
        /* The default action (SIG_IGN cannot stop a fault either): reset and raise again;
         * SA_NODEFER leaves SIGBUS unblocked, so this kills the process here, for a
         * fault and for a signal sent by kill(2) alike. */
        signal(SIGBUS, SIG_DFL);
        raise(SIGBUS);
    }
}

static void install(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    page_mask = ~((uintptr_t)(ps > 0 ? ps : 4096) - 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    installed = sigaction(SIGBUS, &sa, &previous) == 0;
}

int mapguard_add(const void *addr, size_t len)
{
    pthread_once(&once, install);
    if (!installed || !addr || len == 0)
        return -1;
    for (int i = 0; i < MAPGUARD_SLOTS; i++) {
        uintptr_t zero = 0;
        if (__atomic_load_n(&slots[i].start, __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(&slots[i].start, &zero, (uintptr_t)addr, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(&slots[i].faulted, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&slots[i].len, len, __ATOMIC_RELEASE);
            return i;
        }
    }
    return -1;
}

void mapguard_remove(int slot_)
{
    if (slot_ < 0 || slot_ >= MAPGUARD_SLOTS)
        return;
    __atomic_store_n(&slots[slot_].len, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&slots[slot_].start, 0, __ATOMIC_RELEASE);
}

int mapguard_faulted(int slot_)
{
    if (slot_ < 0 || slot_ >= MAPGUARD_SLOTS)
        return 0;
    return __atomic_load_n(&slots[slot_].faulted, __ATOMIC_ACQUIRE);
}

unsigned long mapguard_faults(void)
{
    return __atomic_load_n(&nfaults, __ATOMIC_RELAXED);
}
