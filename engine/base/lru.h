/* Intrusive doubly linked list in recency order: a node inside each entry, front = most recent. */
#ifndef TESSERA_ENGINE_BASE_LRU_H
#define TESSERA_ENGINE_BASE_LRU_H

#include <stddef.h>

/* The links of one entry: embed an lru_node in the entry's struct and get the entry back
 * from a node with LRU_ENTRY.  A node is on one list at most; off every list (after
 * lru_remove, or zeroed) both links are NULL.  The fields may be read to walk a list:
 * from the front along next, from the back along prev. */
typedef struct lru_node {
    struct lru_node *prev;   /* toward the front (used more recently); NULL at the front */
    struct lru_node *next;   /* toward the back (used less recently); NULL at the back */
} lru_node;

/* A list.  All zero (calloc, memset, lru_init) is the empty list.  No locking: the
 * owner's lock guards the list and every node on it. */
typedef struct lru_list {
    lru_node *front;         /* most recently used; NULL when empty */
    lru_node *back;          /* least recently used, the next to evict; NULL when empty */
} lru_list;

/* The entry of type `type` whose lru_node member `member` is `n`; NULL when n is NULL. */
#define LRU_ENTRY(n, type, member) ((type *)lru_entry_((n), offsetof(type, member)))

static inline void *lru_entry_(lru_node *n, size_t offset)
{
    return n ? (void *)((char *)n - offset) : NULL;
}

/* Makes `l` the empty list.  Cannot fail. */
static inline void lru_init(lru_list *l)
{
    l->front = l->back = NULL;
}

/* 1 when `l` holds no node, else 0.  Cannot fail. */
static inline int lru_empty(const lru_list *l)
{
    return l->front == NULL;
}

/* Puts `n` (on no list) first.  Cannot fail. */
static inline void lru_push_front(lru_list *l, lru_node *n)
{
    n->prev = NULL;
    n->next = l->front;
    if (l->front)
        l->front->prev = n;
    else
        l->back = n;
    l->front = n;
}

/* Puts `n` (on no list) last.  Cannot fail. */
static inline void lru_push_back(lru_list *l, lru_node *n)
{
    n->next = NULL;
    n->prev = l->back;
    if (l->back)
        l->back->next = n;
    else
        l->front = n;
    l->back = n;
}

/* Takes `n` (on `l`) off the list and clears its links.  Cannot fail. */
static inline void lru_remove(lru_list *l, lru_node *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        l->front = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        l->back = n->prev;
    n->prev = n->next = NULL;
}

/* Moves `n` (on `l`) to the front: marks it the most recently used.  Cannot fail. */
static inline void lru_move_front(lru_list *l, lru_node *n)
{
    if (l->front == n)
        return;
    lru_remove(l, n);
    lru_push_front(l, n);
}

/* Takes the last node (the least recently used) off `l` and returns it; NULL when `l`
 * is empty.  Cannot fail. */
static inline lru_node *lru_pop_back(lru_list *l)
{
    lru_node *n = l->back;
    if (n)
        lru_remove(l, n);
    return n;
}

#endif
