"""String families: counting and reversing words, joining strings, joining paths (a fix)."""
from __future__ import annotations

import random
from typing import Any

from rlvr.domains.c.families.base import Case, Family, c_char, c_str, shown

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "red", "green", "blue", "x", "io", "tree", "log", "kv",
         "node", "edge", "zeta", "lambda", "pi", "cache", "disk")


def _words(rng: random.Random, lo: int, hi: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]


def _spaced(rng: random.Random, words: list[str], seps: str, ragged: bool) -> str:
    """Words joined by runs of separators; `ragged`: separators before, after and doubled somewhere."""
    out = rng.choice(seps) * rng.randint(1, 2) if ragged else ""
    for i, w in enumerate(words):
        out += w
        if i < len(words) - 1:
            run = 2 if ragged and i == 0 else rng.randint(1, 2)
            out += "".join(rng.choice(seps) for _ in range(run))
    return out + (rng.choice(seps) if ragged else "")


class CountWords(Family):
    name, tier, kind, module = "count_words", "easy", "implement", "words"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"seps": rng.choice([" ", " \t", " ,", " ;:"])}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef WORDS_H\n#define WORDS_H\n#include <stddef.h>\n\n"
                f"/* The characters that separate words. */\n#define WORD_SEPARATORS {c_str(p['seps'])}\n\n"
                "/* The number of words in s: maximal runs of characters that are not separators. */\n"
                "size_t count_words(const char *s);\n\n#endif\n")

    def gold(self, p: dict[str, Any]) -> str:
        return ('#include <string.h>\n#include "words.h"\n\nsize_t count_words(const char *s)\n{\n'
                "    size_t n = 0;\n    int in_word = 0;\n    for (; *s; s++) {\n"
                "        if (strchr(WORD_SEPARATORS, *s)) {\n            in_word = 0;\n"
                "        } else if (!in_word) {\n            in_word = 1;\n            n++;\n        }\n"
                "    }\n    return n;\n}\n")

    def start(self, p: dict[str, Any]) -> str:
        return ('#include "words.h"\n\nsize_t count_words(const char *s)\n{\n    (void)s;\n'
                "    /* your code */\n    return 0;\n}\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return ('#include <string.h>\n#include "words.h"\n\n/* one more word than separators */\n'
                "size_t count_words(const char *s)\n{\n    size_t n = 1;\n"
                "    for (; *s; s++)\n        if (strchr(WORD_SEPARATORS, *s))\n            n++;\n"
                "    return n;\n}\n")

    def describe(self, p: dict[str, Any]) -> str:
        return (f"`count_words(s)` returns how many words `s` holds: a word is a maximal run of characters "
                f"that are not separators ({', '.join(repr(c) for c in p['seps'])}; `WORD_SEPARATORS` in the "
                f"header). Separators may repeat, lead or trail; an empty string has no words.")

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        texts = [_spaced(rng, _words(rng, 2, 5), p["seps"], True), _spaced(rng, _words(rng, 0, 4), p["seps"],
                                                                            rng.random() < 0.5)]
        texts.append(_spaced(rng, _words(rng, 1, 3), p["seps"], False))
        rng.shuffle(texts)
        code = "".join(f'    emit("%zu\\n", count_words({c_str(t)}));\n' for t in texts)
        expect = "".join(f"{sum(1 for w in _split(t, p['seps']) if w)}\n" for t in texts)
        return Case(code, expect, "count_words(" + " | ".join(repr(t) for t in texts) + ")")


def _split(text: str, seps: str) -> list[str]:
    words, cur = [], ""
    for ch in text:
        if ch in seps:
            words.append(cur)
            cur = ""
        else:
            cur += ch
    return [*words, cur]


class ReverseWords(Family):
    name, tier, kind, module = "reverse_words", "easy", "implement", "reverse"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"glue": rng.choice([" ", "-", " / "])}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef REVERSE_H\n#define REVERSE_H\n\n"
                f"#define WORD_GLUE {c_str(p['glue'])}\n\n"
                "/* A new string (malloc'd; the caller frees it) holding the words of s (runs of characters\n"
                "   other than spaces) in reverse order, joined by WORD_GLUE. NULL only if memory runs out. "
                "*/\n"
                "char *reverse_words(const char *s);\n\n#endif\n")

    def gold(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "reverse.h"\n\n'
                "char *reverse_words(const char *s)\n{\n"
                "    size_t len = strlen(s), glue = strlen(WORD_GLUE), words = 0, used = 0;\n"
                "    for (size_t i = 0; i < len; i++)\n"
                "        if (s[i] != ' ' && (i == 0 || s[i - 1] == ' '))\n            words++;\n"
                "    char *out = malloc(len + words * glue + 1);\n    if (!out)\n        return NULL;\n"
                "    size_t end = len;\n    while (end > 0) {\n"
                "        while (end > 0 && s[end - 1] == ' ')\n            end--;\n"
                "        size_t start = end;\n        while (start > 0 && s[start - 1] != ' ')\n"
                "            start--;\n        if (start == end)\n            break;\n"
                "        if (used > 0) {\n            memcpy(out + used, WORD_GLUE, glue);\n"
                "            used += glue;\n        }\n"
                "        memcpy(out + used, s + start, end - start);\n        used += end - start;\n"
                "        end = start;\n    }\n    out[used] = '\\0';\n    return out;\n}\n")

    def start(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include "reverse.h"\n\nchar *reverse_words(const char *s)\n{\n'
                "    (void)s;\n    /* your code */\n    return NULL;\n}\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "reverse.h"\n\n'
                "/* reverses the characters */\nchar *reverse_words(const char *s)\n{\n"
                "    size_t len = strlen(s);\n    char *out = malloc(len + 1);\n    if (!out)\n"
                "        return NULL;\n    for (size_t i = 0; i < len; i++)\n"
                "        out[i] = s[len - 1 - i];\n    out[len] = '\\0';\n    return out;\n}\n")

    def describe(self, p: dict[str, Any]) -> str:
        return ("`reverse_words(s)` returns a new string (allocated with malloc; the caller frees it) "
                "holding "
                f"the words of `s` in reverse order, joined by {p['glue']!r}. Words are runs of characters "
                f"other than spaces; spaces may repeat, lead or trail, and none of them is kept. A string "
                f"without words gives an empty string.")

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        texts = [_spaced(rng, _words(rng, 2, 6), " ", True), _spaced(rng, _words(rng, 0, 3), " ",
                                                                    rng.random() < 0.5)]
        rng.shuffle(texts)
        code = "".join(f"    {{ char *r = reverse_words({c_str(t)}); emit_str(r); free(r); }}\n"
                       for t in texts)
        expect = "".join(shown(p["glue"].join(reversed(t.split()))) + "\n" for t in texts)
        return Case(code, expect, "reverse_words(" + " | ".join(repr(t) for t in texts) + ")")


class JoinStrings(Family):
    name, tier, kind, module = "join_strings", "easy", "implement", "join"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"skip_empty": rng.random() < 0.5}

    def header(self, p: dict[str, Any]) -> str:
        rule = ("Empty parts are skipped (no separator is written for them). " if p["skip_empty"]
                else "Empty parts count like any other. ")
        return ("#ifndef JOIN_H\n#define JOIN_H\n#include <stddef.h>\n\n"
                f"/* A new string (malloc'd; the caller frees it): the n parts joined by sep.\n   {rule}"
                "parts may be NULL when n is 0. */\n"
                "char *join_strings(const char *const *parts, size_t n, const char *sep);\n\n#endif\n")

    def gold(self, p: dict[str, Any]) -> str:
        skip = "        if (SKIP && parts[i][0] == '\\0')\n            continue;\n"
        return ('#include <stdlib.h>\n#include <string.h>\n#include "join.h"\n\n'
                f"#define SKIP {int(p['skip_empty'])}\n\n"
                "char *join_strings(const char *const *parts, size_t n, const char *sep)\n{\n"
                "    size_t total = 1, seplen = strlen(sep);\n    for (size_t i = 0; i < n; i++)\n"
                "        total += strlen(parts[i]) + seplen;\n    char *out = malloc(total);\n"
                "    if (!out)\n        return NULL;\n    size_t used = 0;\n    int first = 1;\n"
                "    for (size_t i = 0; i < n; i++) {\n" + skip +
                "        if (!first) {\n            memcpy(out + used, sep, seplen);\n"
                "            used += seplen;\n        }\n        first = 0;\n"
                "        size_t len = strlen(parts[i]);\n        memcpy(out + used, parts[i], len);\n"
                "        used += len;\n    }\n    out[used] = '\\0';\n    return out;\n}\n")

    def start(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include "join.h"\n\n'
                "char *join_strings(const char *const *parts, size_t n, const char *sep)\n{\n"
                "    (void)parts;\n    (void)n;\n    (void)sep;\n    /* your code */\n    return NULL;\n}\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "join.h"\n\n'
                "/* a separator after every part */\n"
                "char *join_strings(const char *const *parts, size_t n, const char *sep)\n{\n"
                "    size_t total = 1;\n    for (size_t i = 0; i < n; i++)\n"
                "        total += strlen(parts[i]) + strlen(sep);\n    char *out = malloc(total);\n"
                "    if (!out)\n        return NULL;\n    out[0] = '\\0';\n"
                "    for (size_t i = 0; i < n; i++) {\n        strcat(out, parts[i]);\n"
                "        strcat(out, sep);\n    }\n    return out;\n}\n")

    def describe(self, p: dict[str, Any]) -> str:
        rule = ("empty parts are skipped, with no separator written for them"
                if p["skip_empty"] else "empty parts count like any other")
        return (f"`join_strings(parts, n, sep)` returns a new string (malloc'd; the caller frees it) holding "
                f"the `n` parts joined by `sep`; {rule}. With `n == 0` it returns an empty string (and "
                "`parts` "
                f"may be NULL).")

    def _expect(self, p: dict[str, Any], parts: list[str], sep: str) -> str:
        kept = [x for x in parts if x or not p["skip_empty"]]
        return shown(sep.join(kept)) + "\n"

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        calls = [([*_words(rng, 2, 4), ""] if rng.random() < 0.5 else _words(rng, 2, 5), rng.choice(
            [", ", "/", "::", "-"]))]
        calls.append(([] if rng.random() < 0.4 else _words(rng, 1, 3), rng.choice([",", " + "])))
        rng.shuffle(calls)
        code, expect = "", ""
        for parts, sep in calls:
            if parts:
                arr = "{" + ", ".join(c_str(x) for x in parts) + "}"
                code += (f"    {{ const char *ps[] = {arr}; char *r = join_strings(ps, {len(parts)}, "
                         f"{c_str(sep)}); emit_str(r); free(r); }}\n")
            else:
                code += f"    {{ char *r = join_strings(NULL, 0, {c_str(sep)}); emit_str(r); free(r); }}\n"
            expect += self._expect(p, parts, sep)
        return Case(code, expect, "join_strings(" + " | ".join(f"{ps!r} by {s!r}" for ps, s in calls) + ")")


class PathJoin(Family):
    name, tier, kind, module = "path_join", "easy", "fix", "path"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"sep": rng.choice(["/", "\\"])}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef PATH_H\n#define PATH_H\n\n"
                f"#define PATH_SEP {c_char(p['sep'])}\n\n"
                "/* A new string (malloc'd; the caller frees it): dir and name joined by one PATH_SEP.\n"
                "   No separator is added when dir is empty or already ends with one. */\n"
                "char *path_join(const char *dir, const char *name);\n\n#endif\n")

    def _source(self, size: str) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "path.h"\n\n'
                "char *path_join(const char *dir, const char *name)\n{\n"
                "    size_t dlen = strlen(dir), nlen = strlen(name);\n"
                "    int add = dlen > 0 && dir[dlen - 1] != PATH_SEP;\n"
                f"    char *out = malloc({size});\n    if (!out)\n        return NULL;\n"
                "    memcpy(out, dir, dlen);\n    if (add)\n        out[dlen] = PATH_SEP;\n"
                "    memcpy(out + dlen + add, name, nlen + 1);\n    return out;\n}\n")

    def gold(self, p: dict[str, Any]) -> str:
        return self._source("dlen + add + nlen + 1")

    def start(self, p: dict[str, Any]) -> str:
        return self._source("dlen + nlen + 1")

    def wrong(self, p: dict[str, Any]) -> str:
        return self.start(p).replace("    if (!out)", "    /* fixed */\n    if (!out)", 1)

    def describe(self, p: dict[str, Any]) -> str:
        return (f"`path_join(dir, name)` returns a new string (malloc'd; the caller frees it): `dir` and "
                f"`name` joined by one {p['sep']!r}, with none added when `dir` is empty or already ends "
                "with "
                f"one. Users report crashes and corrupted heaps since it was last changed; find the bug in "
                f"`src/path.c` and fix it.")

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        sep = p["sep"]
        # a directory without a separator at its end: the join adds one
        calls = [(sep.join(_words(rng, 1, 3)), rng.choice(WORDS) + ".txt")]
        calls.append(rng.choice([(sep.join(_words(rng, 1, 2)) + sep, "conf"), ("", rng.choice(WORDS)),
                                 (sep + rng.choice(WORDS), "a.log")]))
        rng.shuffle(calls)
        code, expect = "", ""
        for d, n in calls:
            code += f"    {{ char *r = path_join({c_str(d)}, {c_str(n)}); emit_str(r); free(r); }}\n"
            joined = d + n if (not d or d.endswith(sep)) else d + sep + n
            expect += shown(joined) + "\n"
        return Case(code, expect, "path_join(" + " | ".join(f"{d!r}, {n!r}" for d, n in calls) + ")")


FAMILIES: tuple[Family, ...] = (CountWords(), ReverseWords(), JoinStrings(), PathJoin())
