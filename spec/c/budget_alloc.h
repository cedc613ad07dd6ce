/* budget_alloc.h -- a Lua allocator that refuses to grow past limit bytes in
 * use: lua_newstate(budget_alloc, &b) gives the binding's C tests a state
 * that runs out of memory where they choose (lmql_*_test.c). */
#ifndef BUDGET_ALLOC_H
#define BUDGET_ALLOC_H

#include <stdlib.h>

typedef struct budget {
    size_t used, limit;
} budget;

static void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    budget *b = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        b->used -= old;
        return NULL;
    }
    if (nsize > old && b->used + (nsize - old) > b->limit) return NULL;
    ptr = realloc(ptr, nsize);
    if (ptr) b->used = b->used - old + nsize;
    return ptr;
}

#endif
