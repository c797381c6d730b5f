"""Data-structure families, where memory handling matters most: CSV splitting into owned strings, a hash map
with copied keys and a linked list (a fix)."""
from __future__ import annotations

import random
from typing import Any

from rlvr.domains.c.families.base import Case, Family, c_char, c_str
from rlvr.domains.c.families.strings import WORDS


def csv_fields(line: str, sep: str) -> list[str] | None:
    """The model of csv_split: None for a line it refuses."""
    fields, i, n = [], 0, len(line)
    while True:
        if i < n and line[i] == '"':
            i, cur = i + 1, ""
            while True:
                if i >= n:
                    return None
                if line[i] == '"':
                    if i + 1 < n and line[i + 1] == '"':
                        cur, i = cur + '"', i + 2
                        continue
                    i += 1
                    break
                cur, i = cur + line[i], i + 1
            if i < n and line[i] != sep:
                return None
        else:
            j = line.find(sep, i)
            j = n if j < 0 else j
            cur, i = line[i:j], j
        fields.append(cur)
        if i >= n:
            return fields
        i += 1


class CsvSplit(Family):
    name, tier, kind, module = "csv_split", "hard", "implement", "csv"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"sep": rng.choice([",", ";", "|"])}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef CSV_H\n#define CSV_H\n#include <stddef.h>\n\n"
                f"#define CSV_SEP {c_char(p['sep'])}\n\n"
                "/* Splits one CSV line into its fields, separated by CSV_SEP. A field that starts with '\"' "
                "is\n"
                "   quoted: up to the closing quote, CSV_SEP is an ordinary character and \"\" stands for "
                "one\n"
                "   '\"'; the closing quote must end the field. A quote elsewhere is an ordinary character.\n"
                "   Sets *fields to a new array of n new strings (the fields, quotes removed) and returns n "
                "(an\n"
                "   empty line is one empty field). For a line that breaks these rules, or when memory runs\n"
                "   out, sets *fields to NULL and returns 0. */\n"
                "size_t csv_split(const char *line, char ***fields);\n\n"
                "/* Frees what csv_split returned (fields may be NULL when n is 0). */\n"
                "void csv_free(char **fields, size_t n);\n\n#endif\n")

    def gold(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "csv.h"\n\n'
                "void csv_free(char **fields, size_t n)\n{\n    if (!fields)\n        return;\n"
                "    for (size_t i = 0; i < n; i++)\n        free(fields[i]);\n    free(fields);\n}\n\n"
                "size_t csv_split(const char *line, char ***fields)\n{\n"
                "    size_t len = strlen(line), cap = 1, n = 0, i = 0;\n    for (size_t j = 0; j < len; "
                "j++)\n"
                "        if (line[j] == CSV_SEP)\n            cap++;\n    char **out = calloc(cap, sizeof "
                "*out);\n"
                "    if (!out)\n        goto fail;\n    for (;;) {\n        char *f = malloc(len - i + 1);\n"
                "        size_t k = 0;\n        if (!f)\n            goto fail;\n"
                "        if (i < len && line[i] == '\"') {\n            for (i++;; i++) {\n"
                "                if (i >= len) {\n                    free(f);\n                    goto "
                "fail;\n"
                "                }\n                if (line[i] == '\"') {\n"
                "                    if (i + 1 < len && line[i + 1] == '\"') {\n                        "
                "f[k++] = '\"';\n"
                "                        i++;\n                        continue;\n                    }\n"
                "                    i++;\n                    break;\n                }\n"
                "                f[k++] = line[i];\n            }\n"
                "            if (i < len && line[i] != CSV_SEP) {\n                free(f);\n                "
                "goto fail;\n"
                "            }\n        } else {\n            while (i < len && line[i] != CSV_SEP)\n"
                "                f[k++] = line[i++];\n        }\n        f[k] = '\\0';\n        out[n++] = "
                "f;\n"
                "        if (i >= len)\n            break;\n        i++;\n    }\n    *fields = out;\n    "
                "return n;\n"
                "fail:\n    csv_free(out, n);\n    *fields = NULL;\n    return 0;\n}\n")

    def start(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include "csv.h"\n\nvoid csv_free(char **fields, size_t n)\n{\n'
                "    (void)n;\n    free(fields);\n}\n\nsize_t csv_split(const char *line, char "
                "***fields)\n{\n"
                "    (void)line;\n    /* your code */\n    *fields = NULL;\n    return 0;\n}\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "csv.h"\n\n'
                "void csv_free(char **fields, size_t n)\n{\n    for (size_t i = 0; i < n; i++)\n"
                "        free(fields[i]);\n    free(fields);\n}\n\n/* splits at every separator */\n"
                "size_t csv_split(const char *line, char ***fields)\n{\n    size_t n = 1;\n"
                "    for (const char *c = line; *c; c++)\n        n += *c == CSV_SEP;\n"
                "    char **out = calloc(n, sizeof *out);\n    const char *start = line;\n"
                "    for (size_t i = 0; i < n; i++) {\n        const char *end = strchr(start, CSV_SEP);\n"
                "        size_t len = end ? (size_t)(end - start) : strlen(start);\n"
                "        out[i] = malloc(len + 1);\n        memcpy(out[i], start, len);\n"
                "        out[i][len] = '\\0';\n        start += len + 1;\n    }\n    *fields = out;\n"
                "    return n;\n}\n")

    def describe(self, p: dict[str, Any]) -> str:
        return (f"`csv_split(line, &fields)` splits one CSV line at {p['sep']!r} into a new array of new "
                "strings "
                f"and returns how many; a field that starts with `\"` is quoted (the separator is then an "
                f"ordinary character and `\"\"` is one quote), and `csv_free(fields, n)` frees it all. The "
                f"header gives the exact rules, including the lines it must refuse.")

    def _field(self, rng: random.Random, sep: str, quoted: bool) -> str:
        word = rng.choice(WORDS) + rng.choice(["", " " + rng.choice(WORDS), "1"])
        if not quoted:
            return rng.choice([word, "", word + '"x'])
        inner = word + rng.choice([sep + " " + rng.choice(WORDS), '""q""', sep])
        return '"' + inner + '"'

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        sep = p["sep"]
        fields = rng.randint(2, 5)
        lines = [sep.join(self._field(rng, sep, i == 0 or rng.random() < 0.3) for i in range(fields))]
        lines.append(rng.choice(["", sep.join(self._field(rng, sep, False) for _ in range(rng.randint(1, 4))),
                                 '"open' + sep + "x", '"a"b' + sep + "c"]))
        rng.shuffle(lines)
        code, expect = "", ""
        for line in lines:
            code += (f"    {{ char **f = NULL; size_t n = csv_split({c_str(line)}, &f); emit(\"%zu\", n); "
                     "for (size_t i = 0; i < n; i++) emit(\" [%s]\", f[i]); emit(\"\\n\"); "
                     "csv_free(f, n); }\n")
            got = csv_fields(line, sep)
            expect += "0\n" if got is None else f"{len(got)}" + "".join(f" [{x}]" for x in got) + "\n"
        return Case(code, expect, "csv_split(" + " | ".join(repr(x) for x in lines) + ")")


class HashMap(Family):
    name, tier, kind, module = "hash_map", "hard", "implement", "hmap"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"buckets": rng.choice([4, 8, 16])}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef HMAP_H\n#define HMAP_H\n#include <stddef.h>\n\n/* A map from strings to ints. */\n"
                "struct hmap;\n\nstruct hmap *hm_new(void);  /* NULL when memory runs out */\n"
                "/* 1 when key was added, 0 when its value was replaced, -1 when memory runs out; the map "
                "keeps\n"
                "   its own copy of key. */\nint hm_put(struct hmap *m, const char *key, int value);\n"
                "/* 1 and *value set when key is there, else 0 (*value left alone). */\n"
                "int hm_get(const struct hmap *m, const char *key, int *value);\n"
                "int hm_del(struct hmap *m, const char *key);  /* 1 when key was there and is gone, else 0 "
                "*/\n"
                "size_t hm_len(const struct hmap *m);          /* the number of keys */\n"
                "void hm_free(struct hmap *m);                 /* frees the map and its keys; NULL is fine "
                "*/\n\n"
                "#endif\n")

    def gold(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "hmap.h"\n\n'
                f"#define FIRST_BUCKETS {p['buckets']}\n\n"
                "struct entry {\n    char *key;\n    int value;\n    struct entry *next;\n};\n\n"
                "struct hmap {\n    struct entry **b;\n    size_t nb, len;\n};\n\n"
                "static size_t hash(const char *s)\n{\n    size_t h = 1469598103934665603u;\n"
                "    for (; *s; s++)\n        h = (h ^ (unsigned char)*s) * 1099511628211u;\n    return "
                "h;\n}\n\n"
                "struct hmap *hm_new(void)\n{\n    struct hmap *m = malloc(sizeof *m);\n    if (!m)\n"
                "        return NULL;\n    m->b = calloc(FIRST_BUCKETS, sizeof *m->b);\n    if (!m->b) {\n"
                "        free(m);\n        return NULL;\n    }\n    m->nb = FIRST_BUCKETS;\n    m->len = 0;\n"
                "    return m;\n}\n\nstatic struct entry **find(const struct hmap *m, const char *key)\n{\n"
                "    struct entry **e = &m->b[hash(key) % m->nb];\n"
                "    while (*e && strcmp((*e)->key, key) != 0)\n        e = &(*e)->next;\n    return "
                "e;\n}\n\n"
                "static int grow(struct hmap *m)\n{\n    size_t nb = m->nb * 2;\n"
                "    struct entry **b = calloc(nb, sizeof *b);\n    if (!b)\n        return -1;\n"
                "    for (size_t i = 0; i < m->nb; i++)\n        for (struct entry *e = m->b[i], *next; e; e "
                "= next) {\n"
                "            next = e->next;\n            size_t h = hash(e->key) % nb;\n"
                "            e->next = b[h];\n            b[h] = e;\n        }\n    free(m->b);\n    m->b = "
                "b;\n"
                "    m->nb = nb;\n    return 0;\n}\n\n"
                "int hm_put(struct hmap *m, const char *key, int value)\n{\n    struct entry **e = find(m, "
                "key);\n"
                "    if (*e) {\n        (*e)->value = value;\n        return 0;\n    }\n"
                "    if ((m->len + 1) * 4 > m->nb * 3) {\n        if (grow(m))\n            return -1;\n"
                "        e = find(m, key);\n    }\n    struct entry *n = malloc(sizeof *n);\n"
                "    char *k = malloc(strlen(key) + 1);\n    if (!n || !k) {\n        free(n);\n        "
                "free(k);\n"
                "        return -1;\n    }\n    strcpy(k, key);\n    n->key = k;\n    n->value = value;\n"
                "    n->next = NULL;\n    *e = n;\n    m->len++;\n    return 1;\n}\n\n"
                "int hm_get(const struct hmap *m, const char *key, int *value)\n{\n"
                "    struct entry *e = *find(m, key);\n    if (!e)\n        return 0;\n    *value = "
                "e->value;\n"
                "    return 1;\n}\n\nint hm_del(struct hmap *m, const char *key)\n{\n"
                "    struct entry **e = find(m, key), *gone = *e;\n    if (!gone)\n        return 0;\n"
                "    *e = gone->next;\n    free(gone->key);\n    free(gone);\n    m->len--;\n    return "
                "1;\n}\n\n"
                "size_t hm_len(const struct hmap *m)\n{\n    return m->len;\n}\n\n"
                "void hm_free(struct hmap *m)\n{\n    if (!m)\n        return;\n"
                "    for (size_t i = 0; i < m->nb; i++)\n        for (struct entry *e = m->b[i], *next; e; e "
                "= next) {\n"
                "            next = e->next;\n            free(e->key);\n            free(e);\n        }\n"
                "    free(m->b);\n    free(m);\n}\n")

    def start(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include "hmap.h"\n\n/* implement every function */\n\n'
                "struct hmap *hm_new(void)\n{\n    return NULL;\n}\n\n"
                "int hm_put(struct hmap *m, const char *key, int value)\n{\n    (void)m;\n    (void)key;\n"
                "    (void)value;\n    return -1;\n}\n\n"
                "int hm_get(const struct hmap *m, const char *key, int *value)\n{\n    (void)m;\n    "
                "(void)key;\n"
                "    (void)value;\n    return 0;\n}\n\n"
                "int hm_del(struct hmap *m, const char *key)\n{\n    (void)m;\n    (void)key;\n    return "
                "0;\n}\n\n"
                "size_t hm_len(const struct hmap *m)\n{\n    (void)m;\n    return 0;\n}\n\n"
                "void hm_free(struct hmap *m)\n{\n    (void)m;\n}\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return self.gold(p).replace("    *e = gone->next;\n    free(gone->key);\n    free(gone);\n    "
                                    "m->len--;\n",
                                    "    /* kept: deleted keys linger */\n")

    def describe(self, p: dict[str, Any]) -> str:
        return ("`struct hmap` maps strings to ints: `hm_new`, `hm_put` (the map keeps its own copy of the "
                "key), "
                "`hm_get`, `hm_del`, `hm_len` and `hm_free`, exactly as the header specifies. It must keep "
                "working with many keys (thousands), free everything it allocates, and never read or write "
                "memory it does not own.")

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        pool = [f"{rng.choice(WORDS)}{i}" for i in range(rng.choice([6, 12, 40]))]
        model: dict[str, int] = {}
        code, expect = "    struct hmap *m = hm_new();\n", ""
        gone = rng.choice(pool)  # put, deleted, then looked up: deleting must really delete
        ops = [("put", gone), ("del", gone), ("get", gone)]
        for _ in range(rng.randint(8, 40)):
            ops.append((rng.choice(["put", "put", "get", "del"]), rng.choice(pool)))
        for op, key in ops:
            if op == "put":
                v = rng.randint(-50, 50)
                code += f"    emit(\"%d\\n\", hm_put(m, {c_str(key)}, {v}));\n"
                expect += f"{0 if key in model else 1}\n"
                model[key] = v
            elif op == "get":
                code += (f"    {{ int v = -99; int r = hm_get(m, {c_str(key)}, &v); "
                         f"emit(\"%d %d\\n\", r, v); }}\n")
                expect += f"1 {model[key]}\n" if key in model else "0 -99\n"
            else:
                code += f"    emit(\"%d\\n\", hm_del(m, {c_str(key)}));\n"
                expect += f"{int(model.pop(key, None) is not None)}\n"
        code += "    emit(\"%zu\\n\", hm_len(m));\n    hm_free(m);\n"
        return Case(code, expect + f"{len(model)}\n", f"{len(ops)} map operations over {len(pool)} keys")


class LinkedList(Family):
    name, tier, kind, module = "linked_list", "hard", "fix", "list"
    LINK = ("    struct node **link = &head;\n    while (*link) {\n        struct node *cur = *link;\n"
            "        if (cur->value == value) {\n{remove}        } else {\n            link = &cur->next;\n"
            "        }\n    }\n")
    PREV = ("    struct node *prev = NULL, *cur = head;\n    while (cur) {\n        if (cur->value == value) "
            "{\n"
            "            if (prev)\n                prev->next = cur->next;\n            else\n"
            "                head = cur->next;\n{remove}        } else {\n            prev = cur;\n"
            "            cur = cur->next;\n        }\n    }\n")
    LOOPS = {"leak": (LINK, "            *link = cur->next;\n            n++;\n",
                      "            *link = cur->next;\n            free(cur);\n            n++;\n"),
             "after_free": (PREV, "            free(cur);\n            n++;\n            cur = cur->next;\n",
                            "            struct node *next = cur->next;\n            free(cur);\n"
                            "            n++;\n            cur = next;\n")}
    """bug -> (the loop, its buggy removal, its right removal)."""

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"bug": rng.choice(sorted(self.LOOPS))}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef LIST_H\n#define LIST_H\n#include <stddef.h>\n\n"
                "struct node {\n    int value;\n    struct node *next;\n};\n\n"
                "/* A new node holding value in front of head; returns the new head (NULL when memory runs "
                "out,\n"
                "   head unchanged). */\nstruct node *list_push(struct node *head, int value);\n"
                "/* Unlinks and frees every node holding value; *removed = how many. Returns the new head. "
                "*/\n"
                "struct node *list_remove_all(struct node *head, int value, size_t *removed);\n"
                "struct node *list_reverse(struct node *head);  /* the same nodes in reverse order */\n"
                "void list_free(struct node *head);\n\n#endif\n")

    def _source(self, p: dict[str, Any], right: bool) -> str:
        loop, bad, good = self.LOOPS[p["bug"]]
        return ('#include <stdlib.h>\n#include "list.h"\n\n'
                "struct node *list_push(struct node *head, int value)\n{\n    struct node *n = malloc(sizeof "
                "*n);\n"
                "    if (!n)\n        return NULL;\n    n->value = value;\n    n->next = head;\n    return "
                "n;\n}\n\n"
                "struct node *list_remove_all(struct node *head, int value, size_t *removed)\n{\n    size_t "
                "n = 0;\n"
                + loop.replace("{remove}", good if right else bad) + "    *removed = n;\n    return "
                                                                     "head;\n}\n\n"
                "struct node *list_reverse(struct node *head)\n{\n    struct node *prev = NULL;\n    while "
                "(head) {\n"
                "        struct node *next = head->next;\n        head->next = prev;\n        prev = head;\n"
                "        head = next;\n    }\n    return prev;\n}\n\n"
                "void list_free(struct node *head)\n{\n    while (head) {\n        struct node *next = "
                "head->next;\n"
                "        free(head);\n        head = next;\n    }\n}\n")

    def gold(self, p: dict[str, Any]) -> str:
        return self._source(p, True)

    def start(self, p: dict[str, Any]) -> str:
        return self._source(p, False)

    def wrong(self, p: dict[str, Any]) -> str:
        return self.start(p).replace("    *removed = n;", "    *removed = n;  /* fixed */", 1)

    def describe(self, p: dict[str, Any]) -> str:
        return ("The singly linked list in `src/list.c` (`list_push`, `list_remove_all`, `list_reverse`, "
                "`list_free`) passes the old tests, but under the sanitizers the service that uses it "
                "reports "
                "memory errors after removals. Find what `list_remove_all` does wrong and fix it; the header "
                "says what each function must do.")

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        values = [rng.randint(0, 4) for _ in range(rng.randint(3, 12))]
        model = list(reversed(values))  # pushed in front one by one
        code = "    struct node *h = NULL;\n" + "".join(f"    h = list_push(h, {v});\n" for v in values)
        show = "    for (struct node *q = h; q; q = q->next) emit(\"%d \", q->value);\n    emit(\"\\n\");\n"
        expect = ""
        targets = [rng.choice(values)] + [rng.randint(0, 5) for _ in range(rng.randint(0, 2))]
        for t in targets:
            code += f"    {{ size_t k = 99; h = list_remove_all(h, {t}, &k); emit(\"%zu\\n\", k); }}\n" + show
            expect += f"{model.count(t)}\n" + "".join(f"{v} " for v in model if v != t) + "\n"
            model = [v for v in model if v != t]
        code += "    h = list_reverse(h);\n" + show + "    list_free(h);\n"
        expect += "".join(f"{v} " for v in reversed(model)) + "\n"
        return Case(code, expect, f"a list of {len(values)} values, remove_all {targets}")


FAMILIES: tuple[Family, ...] = (CsvSplit(), HashMap(), LinkedList())
