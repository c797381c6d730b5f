"""Container families: a priority queue to implement, and a ring buffer whose wraparound is broken (a fix)."""
from __future__ import annotations

import heapq
import random
from collections import deque
from typing import Any

from rlvr.domains.c.families.base import Case, Family, c_str


class PriorityQueue(Family):
    name, tier, kind, module = "priority_queue", "hard", "implement", "pq"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"order": rng.choice(["min", "max"])}

    def header(self, p: dict[str, Any]) -> str:
        word = "smallest" if p["order"] == "min" else "largest"
        return ("#ifndef PQ_H\n#define PQ_H\n#include <stddef.h>\n\n/* A priority queue of (priority, id). "
                "*/\n"
                "struct pq;\n\nstruct pq *pq_new(void);  /* NULL when memory runs out */\n"
                "int pq_push(struct pq *q, int priority, int id);  /* 0, or -1 when memory runs out */\n"
                f"/* 1 and the entry with the {word} priority (ties: the smallest id), removed; 0 when "
                "empty. */\n"
                "int pq_pop(struct pq *q, int *priority, int *id);\n"
                "size_t pq_len(const struct pq *q);\nvoid pq_free(struct pq *q);  /* NULL is fine "
                "*/\n\n#endif\n")

    def gold(self, p: dict[str, Any]) -> str:
        sign = "<" if p["order"] == "min" else ">"
        return ('#include <stdlib.h>\n#include "pq.h"\n\nstruct item {\n    int prio, id;\n};\n\n'
                "struct pq {\n    struct item *a;\n    size_t len, cap;\n};\n\n"
                "static int before(struct item x, struct item y)\n{\n"
                f"    return x.prio != y.prio ? x.prio {sign} y.prio : x.id < y.id;\n}}\n\n"
                "struct pq *pq_new(void)\n{\n    return calloc(1, sizeof(struct pq));\n}\n\n"
                "int pq_push(struct pq *q, int priority, int id)\n{\n    if (q->len == q->cap) {\n"
                "        size_t cap = q->cap ? q->cap * 2 : 4;\n        struct item *a = realloc(q->a, cap * "
                "sizeof *a);\n"
                "        if (!a)\n            return -1;\n        q->a = a;\n        q->cap = cap;\n    }\n"
                "    size_t i = q->len++;\n    q->a[i] = (struct item){priority, id};\n"
                "    while (i > 0 && before(q->a[i], q->a[(i - 1) / 2])) {\n"
                "        struct item t = q->a[i];\n        q->a[i] = q->a[(i - 1) / 2];\n"
                "        q->a[(i - 1) / 2] = t;\n        i = (i - 1) / 2;\n    }\n    return 0;\n}\n\n"
                "int pq_pop(struct pq *q, int *priority, int *id)\n{\n    if (q->len == 0)\n        return "
                "0;\n"
                "    *priority = q->a[0].prio;\n    *id = q->a[0].id;\n    q->a[0] = q->a[--q->len];\n"
                "    size_t i = 0;\n    for (;;) {\n        size_t l = 2 * i + 1, r = l + 1, m = i;\n"
                "        if (l < q->len && before(q->a[l], q->a[m]))\n            m = l;\n"
                "        if (r < q->len && before(q->a[r], q->a[m]))\n            m = r;\n"
                "        if (m == i)\n            break;\n        struct item t = q->a[i];\n"
                "        q->a[i] = q->a[m];\n        q->a[m] = t;\n        i = m;\n    }\n    return "
                "1;\n}\n\n"
                "size_t pq_len(const struct pq *q)\n{\n    return q->len;\n}\n\n"
                "void pq_free(struct pq *q)\n{\n    if (q)\n        free(q->a);\n    free(q);\n}\n")

    def start(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include "pq.h"\n\n/* implement every function */\n\n'
                "struct pq *pq_new(void)\n{\n    return NULL;\n}\n\n"
                "int pq_push(struct pq *q, int priority, int id)\n{\n    (void)q;\n    (void)priority;\n"
                "    (void)id;\n    return -1;\n}\n\n"
                "int pq_pop(struct pq *q, int *priority, int *id)\n{\n    (void)q;\n    (void)priority;\n"
                "    (void)id;\n    return 0;\n}\n\n"
                "size_t pq_len(const struct pq *q)\n{\n    (void)q;\n    return 0;\n}\n\n"
                "void pq_free(struct pq *q)\n{\n    (void)q;\n}\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include "pq.h"\n\n/* first in, first out */\n'
                "struct pq {\n    int *prio, *id;\n    size_t head, len, cap;\n};\n\n"
                "struct pq *pq_new(void)\n{\n    return calloc(1, sizeof(struct pq));\n}\n\n"
                "int pq_push(struct pq *q, int priority, int id)\n{\n    if (q->head + q->len == q->cap) {\n"
                "        q->cap = q->cap ? q->cap * 2 : 4;\n        q->prio = realloc(q->prio, q->cap * "
                "sizeof(int));\n"
                "        q->id = realloc(q->id, q->cap * sizeof(int));\n    }\n"
                "    q->prio[q->head + q->len] = priority;\n    q->id[q->head + q->len] = id;\n    "
                "q->len++;\n"
                "    return 0;\n}\n\nint pq_pop(struct pq *q, int *priority, int *id)\n{\n    if (!q->len)\n"
                "        return 0;\n    *priority = q->prio[q->head];\n    *id = q->id[q->head];\n    "
                "q->head++;\n"
                "    q->len--;\n    return 1;\n}\n\nsize_t pq_len(const struct pq *q)\n{\n    return "
                "q->len;\n}\n\n"
                "void pq_free(struct pq *q)\n{\n    free(q->prio);\n    free(q->id);\n    free(q);\n}\n")

    def describe(self, p: dict[str, Any]) -> str:
        word = "smallest" if p["order"] == "min" else "largest"
        return ("`struct pq` is a priority queue of (priority, id) pairs: `pq_pop` removes the entry with "
                "the "
                f"{word} priority, ties going to the smallest id. Implement `pq_new`, `pq_push`, `pq_pop`, "
                "`pq_len` and `pq_free` as the header specifies; it must stay fast with many entries and "
                "free "
                f"all it allocates.")

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        sign = 1 if p["order"] == "min" else -1
        heap: list[tuple[int, int]] = []
        code, expect = "    struct pq *q = pq_new();\n", ""
        first = rng.randint(20, 40)  # a first push that must not come out first: FIFO is wrong
        pushes = [(first, 1), (first - 15 * sign, 2)]
        ops: list[tuple[str, int, int]] = [("push", pr, i) for pr, i in pushes]
        ids = 3
        for _ in range(rng.randint(6, 28)):
            if rng.random() < 0.6:
                ops.append(("push", rng.randint(0, 20), ids))
                ids += 1
            else:
                ops.append(("pop", 0, 0))
        ops += [("pop", 0, 0)] * rng.randint(1, 4)
        for op, pr, i in ops:
            if op == "push":
                code += f"    emit(\"%d\\n\", pq_push(q, {pr}, {i}));\n"
                heapq.heappush(heap, (sign * pr, i))
                expect += "0\n"
            else:
                code += ("    { int pr = -1, id = -1; int r = pq_pop(q, &pr, &id); "
                         "emit(\"%d %d %d\\n\", r, pr, id); }\n")
                if heap:
                    kp, ki = heapq.heappop(heap)
                    expect += f"1 {sign * kp} {ki}\n"
                else:
                    expect += "0 -1 -1\n"
        code += "    emit(\"%zu\\n\", pq_len(q));\n    pq_free(q);\n"
        return Case(code, expect + f"{len(heap)}\n", f"{len(ops)} queue operations")


class RingBuffer(Family):
    name, tier, kind, module = "ring_buffer", "hard", "fix", "ring"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef RING_H\n#define RING_H\n#include <stddef.h>\n\n/* A byte queue of fixed capacity. "
                "*/\n"
                "struct ring;\n\nstruct ring *ring_new(size_t capacity);  /* NULL when memory runs out */\n"
                "/* Appends as many of the n bytes of src as fit; returns how many. */\n"
                "size_t ring_write(struct ring *r, const char *src, size_t n);\n"
                "/* Moves up to n of the oldest bytes into dst; returns how many. */\n"
                "size_t ring_read(struct ring *r, char *dst, size_t n);\n"
                "size_t ring_len(const struct ring *r);\nvoid ring_free(struct ring *r);\n\n#endif\n")

    def _source(self, copy: str) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "ring.h"\n\n'
                "struct ring {\n    char *buf;\n    size_t cap, head, len;\n};\n\n"
                "struct ring *ring_new(size_t capacity)\n{\n    struct ring *r = malloc(sizeof *r);\n    if "
                "(!r)\n"
                "        return NULL;\n    r->buf = malloc(capacity ? capacity : 1);\n    if (!r->buf) {\n"
                "        free(r);\n        return NULL;\n    }\n    r->cap = capacity;\n    r->head = r->len "
                "= 0;\n"
                "    return r;\n}\n\nsize_t ring_write(struct ring *r, const char *src, size_t n)\n{\n"
                "    size_t k = n < r->cap - r->len ? n : r->cap - r->len;\n    if (k == 0)\n        return "
                "0;\n"
                "    size_t tail = (r->head + r->len) % r->cap;\n" + copy + "    r->len += k;\n    return "
                                                                            "k;\n}\n\n"
                "size_t ring_read(struct ring *r, char *dst, size_t n)\n{\n    size_t k = n < r->len ? n : "
                "r->len;\n"
                "    if (k == 0)\n        return 0;\n    size_t first = k < r->cap - r->head ? k : r->cap - "
                "r->head;\n"
                "    memcpy(dst, r->buf + r->head, first);\n    memcpy(dst + first, r->buf, k - first);\n"
                "    r->head = (r->head + k) % r->cap;\n    r->len -= k;\n    return k;\n}\n\n"
                "size_t ring_len(const struct ring *r)\n{\n    return r->len;\n}\n\n"
                "void ring_free(struct ring *r)\n{\n    if (r)\n        free(r->buf);\n    free(r);\n}\n")

    def gold(self, p: dict[str, Any]) -> str:
        return self._source("    size_t first = k < r->cap - tail ? k : r->cap - tail;\n"
                            "    memcpy(r->buf + tail, src, first);\n    memcpy(r->buf, src + first, k - "
                            "first);\n")

    def start(self, p: dict[str, Any]) -> str:
        return self._source("    memcpy(r->buf + tail, src, k);\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return self.start(p).replace("    r->len += k;", "    r->len += k;  /* fixed */", 1)

    def describe(self, p: dict[str, Any]) -> str:
        return ("The ring buffer in `src/ring.c` (`ring_new`, `ring_write`, `ring_read`, `ring_len`, "
                "`ring_free`) loses or corrupts data once it has been used for a while, and the sanitizers "
                "report heap errors under load. Find the bug and fix it; the header says what each function "
                "must do.")

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        cap = rng.randint(5, 12)
        model: deque[str] = deque()
        code, expect = f"    struct ring *r = ring_new({cap});\n", ""
        letters = iter("abcdefghijklmnopqrstuvwxyz" * 20)
        # fill most of it, drain most of it, then write across the end: the write must wrap
        ops = [("w", cap - 1), ("r", cap - 2), ("w", cap - 1)]
        ops += [(rng.choice("wwr"), rng.randint(0, cap + 2)) for _ in range(rng.randint(3, 10))]
        for op, n in ops:
            if op == "w":
                data = "".join(next(letters) for _ in range(n))
                k = min(n, cap - len(model))
                model.extend(data[:k])
                code += f"    emit(\"w %zu\\n\", ring_write(r, {c_str(data)}, {n}));\n"
                expect += f"w {k}\n"
            else:
                k = min(n, len(model))
                got = "".join(model.popleft() for _ in range(k))
                code += (f"    {{ char *d = malloc({max(n, 1)}); size_t k = ring_read(r, d, {n}); "
                         f"emit(\"r %zu [%.*s]\\n\", k, (int)k, d); free(d); }}\n")
                expect += f"r {k} [{got}]\n"
        code += "    emit(\"%zu\\n\", ring_len(r));\n    ring_free(r);\n"
        return Case(code, expect + f"{len(model)}\n", f"a ring of {cap} bytes, {len(ops)} reads and writes")


FAMILIES: tuple[Family, ...] = (PriorityQueue(), RingBuffer())
