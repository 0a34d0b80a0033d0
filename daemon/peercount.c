/* Open connections by client address: a fixed-size open-addressing table. */
#include "daemon/peercount.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    peer_key key;                /* family 0: empty */
    unsigned count;
} slot;

struct peercount {
    pthread_mutex_t lock;
    slot *slots;
    size_t mask;                 /* capacity - 1 (a power of two) */
    size_t used;                 /* addresses in the table */
    size_t max_used;             /* at most half the capacity, so probes stay short */
};

peercount *peercount_new(size_t max_addresses)
{
    size_t cap = 16;
    while (cap < 2 * max_addresses && cap < ((size_t)1 << 30))
        cap *= 2;
    peercount *pc = calloc(1, sizeof *pc);
    if (!pc)
        return NULL;
    pc->slots = calloc(cap, sizeof *pc->slots);
    if (!pc->slots) {
        free(pc);
        return NULL;
    }
    pc->mask = cap - 1;
    pc->max_used = cap / 2;
    pthread_mutex_init(&pc->lock, NULL);
    return pc;
}

void peercount_free(peercount *pc)
{
    if (!pc)
        return;
    pthread_mutex_destroy(&pc->lock);
    free(pc->slots);
    free(pc);
}

/* The key of `sa`; 0 when it is neither IPv4 nor IPv6. */
static int make_key(const struct sockaddr *sa, socklen_t len, peer_key *k)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(k, 0, sizeof *k);
    if (!sa)
        return 0;
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        k->family = 4;
        memcpy(k->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 1;
    }
    if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        if (memcmp(a, mapped, sizeof mapped) == 0) {
            k->family = 4;
            memcpy(k->addr, a + 12, 4);
        } else {
            k->family = 6;
            memcpy(k->addr, a, 16);
        }
        return 1;
    }
    return 0;
}

/* FNV-1a over the key. */
static size_t key_hash(const peer_key *k)
{
    uint64_t h = 1469598103934665603ULL ^ k->family;
    for (int i = 0; i < 16; i++)
        h = (h ^ k->addr[i]) * 1099511628211ULL;
    return (size_t)(h ^ (h >> 29));
}

static int key_eq(const peer_key *a, const peer_key *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, sizeof a->addr) == 0;
}

/* The slot holding `k`, or the empty slot where it would go.  Caller holds the lock. */
static size_t find(const peercount *pc, const peer_key *k)
{
    size_t i = key_hash(k) & pc->mask;
    while (pc->slots[i].key.family && !key_eq(&pc->slots[i].key, k))
        i = (i + 1) & pc->mask;
    return i;
}

unsigned peercount_add(peercount *pc, const struct sockaddr *sa, socklen_t len, peer_key *key)
{
    if (!make_key(sa, len, key))
        return 0;
    unsigned n = 0;
    pthread_mutex_lock(&pc->lock);
    size_t i = find(pc, key);
    if (pc->slots[i].key.family) {
        n = ++pc->slots[i].count;
    } else if (pc->used < pc->max_used) {
        pc->slots[i].key = *key;
        pc->slots[i].count = n = 1;
        pc->used++;
    }
    pthread_mutex_unlock(&pc->lock);
    if (!n)
        key->family = 0;
    return n;
}

void peercount_remove(peercount *pc, const peer_key *key)
{
    if (!key->family)
        return;
    pthread_mutex_lock(&pc->lock);
    size_t i = find(pc, key);
    if (pc->slots[i].key.family && --pc->slots[i].count == 0) {
        /* Deletion with backward shift: every later entry of the run moves into the hole
         * when its home slot does not lie cyclically in (hole, its slot]. */
        pc->slots[i].key.family = 0;
        pc->used--;
        size_t hole = i;
        for (size_t j = (i + 1) & pc->mask; pc->slots[j].key.family; j = (j + 1) & pc->mask) {
            size_t home = key_hash(&pc->slots[j].key) & pc->mask;
            if (((j - home) & pc->mask) >= ((j - hole) & pc->mask)) {
                pc->slots[hole] = pc->slots[j];
                pc->slots[j].key.family = 0;
                hole = j;
            }
        }
    }
    pthread_mutex_unlock(&pc->lock);
}

unsigned peercount_get(peercount *pc, const struct sockaddr *sa, socklen_t len)
{
    peer_key k;
    if (!make_key(sa, len, &k))
        return 0;
    pthread_mutex_lock(&pc->lock);
    size_t i = find(pc, &k);
    unsigned n = pc->slots[i].key.family ? pc->slots[i].count : 0;
    pthread_mutex_unlock(&pc->lock);
    return n;
}

size_t peercount_addresses(peercount *pc)
{
    pthread_mutex_lock(&pc->lock);
    size_t n = pc->used;
    pthread_mutex_unlock(&pc->lock);
    return n;
}
