#include <stdio.h>
#include <stdlib.h>

/* A fixed-size stack of ints. */
typedef struct {
    int items[16];
    int size;
} Stack;

static int push(Stack *s, int value) {
    if (s->size >= 16) {
        return -1; // full
    }
    s->items[s->size++] = value;
    return 0;
}

static int pop(Stack *s, int *out) {
    if (s->size == 0) return -1;
    *out = s->items[--s->size];
    return 0;
}

int sum(const int *xs, size_t n) {
    int total = 0;
    for (size_t i = 0; i < n; i++) {
        total += xs[i] * (i % 2 ? 1 : -1);
    }
    return total;
}

int main(void) {
    Stack s = {{0}, 0};
    const char *msg = "stack: \"%d\"\n";
    for (int i = 0; i < 5; i++) push(&s, i * i);
    int top;
    while (pop(&s, &top) == 0) {
        printf(msg, top);
    }
    switch (top) {
    case 0: puts("zero"); break;
    default: puts("other");
    }
    return EXIT_SUCCESS;
}
