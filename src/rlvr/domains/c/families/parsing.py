"""Parsing and buffer families: run-length encoding into a bounded buffer, config lines, strict integers
(where a naive parser overflows), replacing substrings and a string builder (both fixes)."""
from __future__ import annotations

import random
import re
from typing import Any

from rlvr.domains.c.families.base import Case, Family, c_char, c_str, shown
from rlvr.domains.c.families.strings import WORDS

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


class RleEncode(Family):
    name, tier, kind, module = "rle_encode", "medium", "implement", "rle"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"ones": rng.random() < 0.5}

    def header(self, p: dict[str, Any]) -> str:
        rule = "" if p["ones"] else "; a run of one is the character alone"
        return ("#ifndef RLE_H\n#define RLE_H\n#include <stddef.h>\n\n"
                "/* Run-length encodes s into out, a buffer of cap bytes: each run of one character becomes "
                "the\n"
                f"   character followed by the run's length in decimal{rule}. Writes the NUL-terminated\n"
                "   encoding and returns its length, or returns -1 when it does not fit in cap bytes (NUL\n"
                "   included). Never writes past cap bytes. */\n"
                "int rle_encode(const char *s, char *out, size_t cap);\n\n#endif\n")

    def gold(self, p: dict[str, Any]) -> str:
        return ('#include <stdio.h>\n#include <string.h>\n#include "rle.h"\n\n'
                f"#define RLE_ONES {int(p['ones'])}\n\n"
                "int rle_encode(const char *s, char *out, size_t cap)\n{\n    size_t used = 0;\n"
                "    while (*s) {\n        char c = *s;\n        size_t run = 0;\n"
                "        while (s[run] == c)\n            run++;\n        char piece[32];\n"
                "        int n = (RLE_ONES || run > 1) ? snprintf(piece, sizeof piece, \"%c%zu\", c, run)\n"
                "                                     : snprintf(piece, sizeof piece, \"%c\", c);\n"
                "        if (used + (size_t)n + 1 > cap)\n            return -1;\n"
                "        memcpy(out + used, piece, (size_t)n);\n        used += (size_t)n;\n        s += "
                "run;\n"
                "    }\n    if (used + 1 > cap)\n        return -1;\n    out[used] = '\\0';\n"
                "    return (int)used;\n}\n")

    def start(self, p: dict[str, Any]) -> str:
        return ('#include "rle.h"\n\nint rle_encode(const char *s, char *out, size_t cap)\n{\n'
                "    (void)s;\n    (void)out;\n    (void)cap;\n    /* your code */\n    return -1;\n}\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return ('#include <stdio.h>\n#include "rle.h"\n\n/* writes the whole encoding, whatever cap says */\n'
                "int rle_encode(const char *s, char *out, size_t cap)\n{\n    (void)cap;\n    int used = 0;\n"
                "    while (*s) {\n        char c = *s;\n        int run = 0;\n        while (s[run] == c)\n"
                "            run++;\n        used += sprintf(out + used, \"%c%d\", c, run);\n        s += "
                "run;\n"
                "    }\n    out[used] = '\\0';\n    return used;\n}\n")

    def describe(self, p: dict[str, Any]) -> str:
        rule = ("every run, even of one, is written with its length (`a1`)" if p["ones"]
                else "a run of one is the character alone (`a`, not `a1`)")
        return ("`rle_encode(s, out, cap)` run-length encodes `s` into the buffer `out` of `cap` bytes: "
                "each "
                f"run of one character becomes the character followed by its length in decimal, and {rule}. "
                f"It returns the encoding's length, or -1 when the encoding and its NUL do not fit in `cap` "
                f"bytes, and it never writes past `cap` bytes.")

    def encode(self, p: dict[str, Any], s: str) -> str:
        out, i = "", 0
        while i < len(s):
            j = i
            while j < len(s) and s[j] == s[i]:
                j += 1
            out += s[i] + (str(j - i) if p["ones"] or j - i > 1 else "")
            i = j
        return out

    def _text(self, rng: random.Random) -> str:
        runs = rng.randint(2, 6)
        return "".join(rng.choice("abcxyz") * rng.choice([1, 1, 2, 3, 5, 11]) for _ in range(runs))

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        calls = []
        for fit in ("exact", "short", rng.choice(["roomy", "exact"])):
            s = self._text(rng)
            n = len(self.encode(p, s))
            calls.append((s, {"exact": n + 1, "short": n, "roomy": n + 20}[fit]))
        rng.shuffle(calls)
        code, expect = "", ""
        for s, cap in calls:
            code += (f"    {{ char *b = malloc({cap}); int n = rle_encode({c_str(s)}, b, {cap}); "
                     f"if (n >= 0) emit(\"%d %s\\n\", n, b); else emit(\"%d\\n\", n); free(b); }}\n")
            enc = self.encode(p, s)
            expect += f"{len(enc)} {enc}\n" if len(enc) + 1 <= cap else "-1\n"
        return Case(code, expect, "rle_encode(" + " | ".join(f"{s!r}, cap {c}" for s, c in calls) + ")")


class ParseKv(Family):
    name, tier, kind, module = "parse_kv", "medium", "implement", "kv"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"comment": rng.choice(["#", ";"])}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef KV_H\n#define KV_H\n#include <stddef.h>\n\n"
                f"#define COMMENT_CHAR {c_char(p['comment'])}\n\n"
                "/* Parses one line of a config file.\n"
                "   A blank line, or one whose first character other than space or tab is COMMENT_CHAR,\n"
                "   returns 1. Otherwise the key is what comes before the line's first '=' and the value "
                "what\n"
                "   comes after it, each without the spaces and tabs around it, copied NUL-terminated into\n"
                "   key (keycap bytes) and val (valcap bytes); returns 0. Returns -1 when the line has no "
                "'='\n"
                "   or the key is empty, and -2 when the key or the value does not fit its buffer (NUL\n"
                "   included). Never writes past keycap or valcap bytes. */\n"
                "int parse_kv(const char *line, char *key, size_t keycap, char *val, size_t valcap);\n\n"
                "#endif\n")

    def gold(self, p: dict[str, Any]) -> str:
        return ('#include <string.h>\n#include "kv.h"\n\nstatic int blank(char c)\n{\n'
                "    return c == ' ' || c == '\\t';\n}\n\n"
                "static size_t trimmed(const char **from, const char *to)\n{\n"
                "    while (*from < to && blank(**from))\n        (*from)++;\n"
                "    while (to > *from && blank(to[-1]))\n        to--;\n    return (size_t)(to - "
                "*from);\n}\n\n"
                "int parse_kv(const char *line, char *key, size_t keycap, char *val, size_t valcap)\n{\n"
                "    const char *p = line;\n    while (blank(*p))\n        p++;\n"
                "    if (*p == '\\0' || *p == COMMENT_CHAR)\n        return 1;\n"
                "    const char *eq = strchr(line, '=');\n    if (!eq)\n        return -1;\n"
                "    const char *k = line, *v = eq + 1;\n    size_t klen = trimmed(&k, eq);\n"
                "    size_t vlen = trimmed(&v, line + strlen(line));\n    if (klen == 0)\n        return "
                "-1;\n"
                "    if (klen + 1 > keycap || vlen + 1 > valcap)\n        return -2;\n"
                "    memcpy(key, k, klen);\n    key[klen] = '\\0';\n    memcpy(val, v, vlen);\n"
                "    val[vlen] = '\\0';\n    return 0;\n}\n")

    def start(self, p: dict[str, Any]) -> str:
        return ('#include "kv.h"\n\n'
                "int parse_kv(const char *line, char *key, size_t keycap, char *val, size_t valcap)\n{\n"
                "    (void)line;\n    (void)key;\n    (void)keycap;\n    (void)val;\n    (void)valcap;\n"
                "    /* your code */\n    return -1;\n}\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return self.gold(p).replace("    size_t klen = trimmed(&k, eq);\n    size_t vlen = trimmed(&v, line "
                                    "+ strlen("
                                    "line));\n",
                                    "    size_t klen = (size_t)(eq - k);  /* no trimming */\n"
                                    "    size_t vlen = strlen(v);\n")

    def describe(self, p: dict[str, Any]) -> str:
        return ("`parse_kv(line, key, keycap, val, valcap)` parses one line of a config file: blank lines "
                "and "
                f"comments (first non-blank character {p['comment']!r}) return 1; otherwise the key (before "
                "the "
                "first `=`) and the value (after it), each trimmed of spaces and tabs, are copied into "
                "`key` "
                f"and `val` and it returns 0; -1 for a line without `=` or with an empty key, -2 when either "
                f"does not fit its buffer. It never writes past `keycap` / `valcap` bytes.")

    def parse(self, p: dict[str, Any], line: str, kc: int, vc: int) -> str:
        if not line.strip(" \t") or line.lstrip(" \t").startswith(p["comment"]):
            return "1\n"
        if "=" not in line:
            return "-1\n"
        k, _, v = line.partition("=")
        k, v = k.strip(" \t"), v.strip(" \t")
        if not k:
            return "-1\n"
        if len(k) + 1 > kc or len(v) + 1 > vc:
            return "-2\n"
        return f"0 [{k}]=[{v}]\n"

    def _line(self, rng: random.Random, kind: str, comment: str) -> str:
        key, val = rng.choice(WORDS) + rng.choice(["", "_dir", ".port", "2"]), rng.choice(
            ["8080", "/var/" + rng.choice(WORDS), "on", "a=b", "x y"])
        pad = lambda: rng.choice([" ", "  ", "\t", " \t"])  # noqa: E731
        return {"spaced": f"{pad()}{key}{pad()}={pad()}{val}{pad()}", "plain": f"{key}={val}",
                "comment": f"{pad()}{comment} {key}={val}", "blank": pad(),
                "noeq": f"{key} {val}", "nokey": f"{pad()}= {val}"}[kind]

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        kinds = ["spaced", rng.choice(["plain", "comment", "blank", "noeq", "nokey"]), rng.choice(
            ["spaced", "plain", "tight"])]
        calls = []
        for kind in kinds:
            tight = kind == "tight"
            line = self._line(rng, "plain" if tight else kind, p["comment"])
            k, _, v = line.partition("=")
            kc = len(k.strip(" \t")) + 1 if tight else 64
            vc = len(v.strip(" \t")) + (rng.choice([0, 1]) if tight else 64)
            calls.append((line, kc, vc))
        rng.shuffle(calls)
        code, expect = "", ""
        for line, kc, vc in calls:
            code += (f"    {{ char *k = malloc({kc}), *v = malloc({vc}); int r = parse_kv({c_str(line)}, k, "
                     f"{kc}, "
                     f"v, {vc}); if (r == 0) emit(\"%d [%s]=[%s]\\n\", r, k, v); else emit(\"%d\\n\", r); "
                     f"free(k); free(v); }}\n")
            expect += self.parse(p, line, kc, vc)
        return Case(code, expect, "parse_kv(" + " | ".join(repr(c[0]) for c in calls) + ")")


class ParseLong(Family):
    name, tier, kind, module = "parse_long", "medium", "implement", "num"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"underscores": rng.random() < 0.5}

    def header(self, p: dict[str, Any]) -> str:
        rule = (", with single '_' allowed between two digits (1_000)" if p["underscores"] else "")
        return ("#ifndef NUM_H\n#define NUM_H\n\n"
                "/* Parses s as a decimal long: optional spaces, an optional sign, one or more digits"
                f"{rule},\n   optional spaces, nothing else. Returns 0 and sets *out; returns -1 when s is "
                "not "
                "such a number\n   and -2 when it is one outside [LONG_MIN, LONG_MAX]; *out is left alone on "
                "either error. */\nint parse_long(const char *s, long *out);\n\n#endif\n")

    def gold(self, p: dict[str, Any]) -> str:
        return ('#include <limits.h>\n#include "num.h"\n\n'
                f"#define UNDERSCORES {int(p['underscores'])}\n\n"
                "static int digit(char c)\n{\n    return c >= '0' && c <= '9';\n}\n\n"
                "int parse_long(const char *s, long *out)\n{\n    while (*s == ' ')\n        s++;\n"
                "    int neg = 0;\n    if (*s == '+' || *s == '-') {\n        neg = *s == '-';\n"
                "        s++;\n    }\n    unsigned long long limit = (unsigned long long)LONG_MAX + (neg ? "
                "1u : 0u);\n"
                "    unsigned long long v = 0;\n    int digits = 0, over = 0;\n    for (; *s; s++) {\n"
                "        if (digit(*s)) {\n            unsigned d = (unsigned)(*s - '0');\n"
                "            if (v > (limit - d) / 10)\n                over = 1;\n"
                "            else\n                v = v * 10 + d;\n            digits++;\n"
                "        } else if (UNDERSCORES && *s == '_' && digits > 0 && digit(s[-1]) && digit(s[1])) "
                "{\n"
                "            continue;\n        } else {\n            break;\n        }\n    }\n"
                "    while (*s == ' ')\n        s++;\n    if (*s != '\\0' || digits == 0)\n        return "
                "-1;\n"
                "    if (over)\n        return -2;\n"
                "    if (neg)\n        *out = v == (unsigned long long)LONG_MAX + 1 ? LONG_MIN : -(long)v;\n"
                "    else\n        *out = (long)v;\n    return 0;\n}\n")

    def start(self, p: dict[str, Any]) -> str:
        return ('#include "num.h"\n\nint parse_long(const char *s, long *out)\n{\n    (void)s;\n'
                "    (void)out;\n    /* your code */\n    return -1;\n}\n")

    def wrong(self, p: dict[str, Any]) -> str:
        return ('#include "num.h"\n\n/* accumulates without looking at the range */\n'
                "int parse_long(const char *s, long *out)\n{\n    while (*s == ' ')\n        s++;\n"
                "    long sign = 1, v = 0;\n    if (*s == '+' || *s == '-')\n        sign = *s++ == '-' ? -1 "
                ": 1;\n"
                "    if (*s < '0' || *s > '9')\n        return -1;\n"
                "    for (; (*s >= '0' && *s <= '9') || *s == '_'; s++)\n        if (*s != '_')\n"
                "            v = v * 10 + (*s - '0');\n    while (*s == ' ')\n        s++;\n"
                "    if (*s)\n        return -1;\n    *out = sign * v;\n    return 0;\n}\n")

    def describe(self, p: dict[str, Any]) -> str:
        rule = ("; a single `_` may stand between two digits (`1_000`)" if p["underscores"] else "")
        return ("`parse_long(s, out)` parses a decimal long: optional spaces, an optional sign, "
                f"digits{rule}, "
                "optional spaces and nothing else. It returns 0 and sets `*out`, -1 for text that is not "
                "such "
                f"a number, and -2 for a number outside `[LONG_MIN, LONG_MAX]`, leaving `*out` alone on both "
                f"errors. The tests are built with UBSan: signed overflow on the way counts as a failure.")

    def parse(self, p: dict[str, Any], s: str) -> str:
        body = r"\d+(?:_\d+)*" if p["underscores"] else r"\d+"
        m = re.fullmatch(rf" *([+-]?)({body}) *", s)
        if not m:
            return "-1 7\n"
        v = int(m.group(2).replace("_", "")) * (-1 if m.group(1) == "-" else 1)
        return f"0 {v}\n" if LONG_MIN <= v <= LONG_MAX else "-2 7\n"

    def _text(self, rng: random.Random, kind: str) -> str:
        n = rng.choice([0, 7, 42, 65535, 123456789, 2 ** 40 + 3])
        return {"ok": f"{rng.choice(['', ' ', '  '])}{rng.choice(['', '+', '-'])}{n}{rng.choice(['', ' '])}",
                "big": rng.choice(["9223372036854775808", "-9223372036854775809", "99999999999999999999",
                                   " 18446744073709551616 "]),
                "edge": rng.choice(["9223372036854775807", "-9223372036854775808"]),
                "junk": rng.choice(["", " ", "-", "12a", "1 2", "0x10", "--5", "+ 3"]),
                "under": rng.choice(["1_000", "12_345_678", "1__0", "_1", "1_", "-4_2"])}[kind]

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        kinds = ["ok", "big", rng.choice(["edge", "junk", "under", "ok"])]
        texts = [self._text(rng, k) for k in kinds]
        rng.shuffle(texts)
        code = "".join(f"    {{ long v = 7; int r = parse_long({c_str(t)}, &v); "
                       f"emit(\"%d %ld\\n\", r, v); }}\n" for t in texts)
        return Case(code, "".join(self.parse(p, t) for t in texts),
                    "parse_long(" + " | ".join(repr(t) for t in texts) + ")")


class ReplaceAll(Family):
    name, tier, kind, module = "replace_all", "medium", "fix", "replace"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef REPLACE_H\n#define REPLACE_H\n\n"
                "/* A new string (malloc'd; the caller frees it): s with every occurrence of from, found "
                "left to\n"
                "   right without overlaps, replaced by to. An empty from gives a copy of s. */\n"
                "char *replace_all(const char *s, const char *from, const char *to);\n\n#endif\n")

    def _source(self, size: str) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "replace.h"\n\n'
                "char *replace_all(const char *s, const char *from, const char *to)\n{\n"
                "    size_t slen = strlen(s), flen = strlen(from), tlen = strlen(to), count = 0;\n"
                "    if (flen > 0)\n        for (const char *p = strstr(s, from); p; p = strstr(p + flen, "
                "from))\n"
                "            count++;\n    size_t size = slen - count * flen + count * tlen;\n"
                f"    char *out = malloc({size});\n    if (!out)\n        return NULL;\n    char *w = out;\n"
                "    while (*s) {\n        if (flen > 0 && strncmp(s, from, flen) == 0) {\n"
                "            memcpy(w, to, tlen);\n            w += tlen;\n            s += flen;\n"
                "        } else {\n            *w++ = *s++;\n        }\n    }\n    *w = '\\0';\n"
                "    return out;\n}\n")

    def gold(self, p: dict[str, Any]) -> str:
        return self._source("size + 1")

    def start(self, p: dict[str, Any]) -> str:
        return self._source("size")

    def wrong(self, p: dict[str, Any]) -> str:
        return self.start(p).replace("    char *w = out;", "    char *w = out;  /* fixed */", 1)

    def describe(self, p: dict[str, Any]) -> str:
        return ("`replace_all(s, from, to)` returns a new string (malloc'd; the caller frees it): `s` with "
                "every "
                "occurrence of `from` (found left to right, without overlaps) replaced by `to`; an empty "
                "`from` "
                "gives a copy. Since the last release the service that uses it crashes now and then with a "
                "corrupted heap; find the bug in `src/replace.c` and fix it.")

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        calls = []
        for _ in range(3):
            base = [rng.choice(WORDS) for _ in range(rng.randint(2, 5))]
            frm = rng.choice([rng.choice(base), "a", "e", ""])
            calls.append((" ".join(base), frm, rng.choice(["", "#", "<>", "XYZW", rng.choice(WORDS)])))
        rng.shuffle(calls)
        code, expect = "", ""
        for s, f, t in calls:
            code += (f"    {{ char *r = replace_all({c_str(s)}, {c_str(f)}, {c_str(t)}); emit_str(r); "
                     f"free(r); }}\n")
            expect += shown(s.replace(f, t) if f else s) + "\n"
        shown_calls = " | ".join(f"{s!r}, {f!r}, {t!r}" for s, f, t in calls)
        return Case(code, expect, f"replace_all({shown_calls})")


class StringBuilder(Family):
    name, tier, kind, module = "string_builder", "medium", "fix", "sbuf"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"first": rng.choice([8, 16, 32])}

    def header(self, p: dict[str, Any]) -> str:
        return ("#ifndef SBUF_H\n#define SBUF_H\n#include <stddef.h>\n\n"
                "/* A growable string. */\nstruct sbuf {\n    char *data;\n    size_t len, cap;\n};\n\n"
                "void sb_init(struct sbuf *b);                 /* empty, holding no memory yet */\n"
                "int sb_append(struct sbuf *b, const char *s); /* 0, or -1 when memory runs out */\n"
                "int sb_putc(struct sbuf *b, char c);          /* 0, or -1 when memory runs out */\n"
                "/* The string built so far (malloc'd; the caller frees it; \"\" when empty); b is empty "
                "again. */\n"
                "char *sb_finish(struct sbuf *b);\n"
                "void sb_free(struct sbuf *b);                 /* releases its memory; b is empty again "
                "*/\n\n"
                "#endif\n")

    def _source(self, p: dict[str, Any], need: str) -> str:
        return ('#include <stdlib.h>\n#include <string.h>\n#include "sbuf.h"\n\n'
                f"#define FIRST_CAP {p['first']}\n\n"
                "void sb_init(struct sbuf *b)\n{\n    b->data = NULL;\n    b->len = b->cap = 0;\n}\n\n"
                f"static int reserve(struct sbuf *b, size_t extra)\n{{\n    size_t need = {need};\n"
                "    if (need <= b->cap)\n        return 0;\n    size_t cap = b->cap ? b->cap : FIRST_CAP;\n"
                "    while (cap < need)\n        cap *= 2;\n    char *d = realloc(b->data, cap);\n"
                "    if (!d)\n        return -1;\n    b->data = d;\n    b->cap = cap;\n    return 0;\n}\n\n"
                "int sb_append(struct sbuf *b, const char *s)\n{\n    size_t n = strlen(s);\n"
                "    if (reserve(b, n))\n        return -1;\n    memcpy(b->data + b->len, s, n + 1);\n"
                "    b->len += n;\n    return 0;\n}\n\n"
                "int sb_putc(struct sbuf *b, char c)\n{\n    char s[2] = {c, '\\0'};\n    return "
                "sb_append(b, s);\n}\n\n"
                "char *sb_finish(struct sbuf *b)\n{\n    char *out = b->data ? b->data : calloc(1, 1);\n"
                "    sb_init(b);\n    return out;\n}\n\n"
                "void sb_free(struct sbuf *b)\n{\n    free(b->data);\n    sb_init(b);\n}\n")

    def gold(self, p: dict[str, Any]) -> str:
        return self._source(p, "b->len + extra + 1")

    def start(self, p: dict[str, Any]) -> str:
        return self._source(p, "b->len + extra")

    def wrong(self, p: dict[str, Any]) -> str:
        return self.start(p).replace("    b->len += n;", "    b->len += n;  /* fixed */", 1)

    def describe(self, p: dict[str, Any]) -> str:
        return ("`struct sbuf` is a growable string (`sb_init`, `sb_append`, `sb_putc`, `sb_finish`, "
                "`sb_free`; "
                "the header says what each does). A report generator built on it crashes on some inputs, and "
                "the crash moves when the report changes; find the bug in `src/sbuf.c` and fix it.")

    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        target = p["first"] * rng.choice([1, 2])  # the length reaches a capacity exactly on the way
        pieces, total = [], 0
        while total < target:
            piece = "".join(rng.choice("abcdefgh") for _ in range(min(target - total, rng.randint(1, 7))))
            pieces.append(piece)
            total += len(piece)
        for _ in range(rng.randint(0, 3)):
            pieces.append("".join(rng.choice("xyz") for _ in range(rng.randint(1, 9))))
        code = "    struct sbuf b;\n    sb_init(&b);\n"
        for piece in pieces:
            if len(piece) == 1 and rng.random() < 0.5:
                code += f"    emit(\"%d\\n\", sb_putc(&b, {c_char(piece)}));\n"
            else:
                code += f"    emit(\"%d\\n\", sb_append(&b, {c_str(piece)}));\n"
        code += "    { char *r = sb_finish(&b); emit_str(r); free(r); }\n"
        code += "    emit(\"%d\\n\", sb_append(&b, \"tail\"));\n    sb_free(&b);\n"
        expect = "0\n" * len(pieces) + shown("".join(pieces)) + "\n0\n"
        return Case(code, expect, f"sb_append x{len(pieces)} up to {len(''.join(pieces))} bytes")


FAMILIES: tuple[Family, ...] = (RleEncode(), ParseKv(), ParseLong(), ReplaceAll(), StringBuilder())
