"""The c domain's C side: the workspace's Makefile and visible tests, and the hidden harness the verifier
compiles against the final sources, rendered from a family's cases; `supervisor.py` (a standalone script) is
what runs them in the sandbox."""
from __future__ import annotations

from functools import cache
from pathlib import Path

from rlvr.domains.c.families.base import Case, c_str

SUPERVISOR = "judge/supervisor.py"
"""Where the supervisor lies in the verification sandbox."""
HARNESS = "judge/harness.c"
"""Where the hidden harness lies (beside the pristine header it includes)."""
MARK = "RLVR-C-RESULT"
"""Prefix of the supervisor's signed result line."""
LEAK_EXIT = 86
"""The harness's exit status when a case leaves memory allocated."""

EMIT = """static void emit_str(const char *s)
{
    if (s)
        emit("[%s]\\n", s);
    else
        emit("(null)\\n");
}
"""

VISIBLE = """/* Visible tests of {module}: `make test` builds them with the sanitizers and runs them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "{module}.h"

static char got[1 << 16];
static size_t used;
static int passed, failed;

static void rlvr_emit(const char *fmt, ...)
{{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(got + used, sizeof got - used, fmt, ap);
    va_end(ap);
    if (n > 0)
        used = used + (size_t)n < sizeof got ? used + (size_t)n : sizeof got - 1;
}}

{emit_str}
static void check(const char *what, const char *want)
{{
    if (strcmp(got, want) == 0) {{
        passed++;
    }} else {{
        failed++;
        printf("FAIL %s\\n--- expected\\n%s--- got\\n%s", what, want, got);
    }}
    used = 0;
    got[0] = '\\0';
}}

int main(void)
{{
{body}    printf("%d passed, %d failed\\n", passed, failed);
    return failed != 0;
}}
"""

HIDDEN = """/* The hidden harness: case K runs alone in its own process (`harness K`); the cases
   themselves are in the units beside this one, compiled at the same time. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

size_t __sanitizer_get_current_allocated_bytes(void);
static char out_buf[1 << 16];

void rlvr_emit(const char *fmt, ...)
{{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}}

void rlvr_emit_str(const char *s)
{{
    if (s)
        rlvr_emit("[%s]\\n", s);
    else
        rlvr_emit("(null)\\n");
}}

{declarations}
int main(int argc, char **argv)
{{
    static void (*const cases[])(void) = {{{table}}};
    setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);
    int k = argc == 2 ? atoi(argv[1]) : -1;
    if (k < 0 || k >= (int)(sizeof cases / sizeof cases[0]))
        return 3;
    size_t before = __sanitizer_get_current_allocated_bytes();
    cases[k]();
    size_t after = __sanitizer_get_current_allocated_bytes();
    fflush(stdout);
    if (after != before) {{
        fprintf(stderr, "leak: %zu bytes allocated during the case are still allocated\\n",
                after - before);
        return {leak};
    }}
    return 0;
}}
"""

UNIT = """/* Cases of the hidden harness. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "{module}.h"

/* the harness's own names are rlvr_*: a candidate's helper called emit never clashes with them */
void rlvr_emit(const char *fmt, ...);
void rlvr_emit_str(const char *s);
#define emit rlvr_emit
#define emit_str rlvr_emit_str

{body}"""

UNITS = 2
"""Units the cases are split into, compiled side by side (a hard family's cases are long to compile)."""


MAKEFILE = """# `make test` builds the visible tests with AddressSanitizer and UBSan and runs them.
CC = gcc
CFLAGS = -std=c11 -Wall -Wextra -g -O0 -Iinclude -fsanitize=address,undefined -fno-sanitize-recover=all
SRC = $(wildcard src/*.c)

build/test_{module}: tests/test_{module}.c $(SRC) $(wildcard include/*.h)
\t@mkdir -p build
\t$(CC) $(CFLAGS) -o $@ tests/test_{module}.c $(SRC)

test: build/test_{module}
\t./build/test_{module}

clean:
\trm -rf build

.PHONY: test clean
"""


def _block(code: str, indent: str = "    ") -> str:
    """A case's statements as one block at `indent` (they are written for a block at four spaces)."""
    lines = code.rstrip("\n").split("\n")
    return indent + "{\n" + "".join(indent + line + "\n" for line in lines) + indent + "}\n"


def visible_tests(module: str, cases: list[Case]) -> str:
    """tests/test_<module>.c: each case's statements, then a check of what they printed."""
    body = "".join(_block(c.code) + f"    check({c_str(c.label)}, {c_str(c.expect)});\n" for c in cases)
    return VISIBLE.format(module=module, emit_str=EMIT, body=body)


def hidden_harness(module: str, cases: list[Case]) -> dict[str, str]:
    """The hidden harness as judge/ files: `harness.c` (main: `harness K` runs case K and prints what it
    printed; a leak is exit status LEAK_EXIT) and the units holding the cases, one function each."""
    units = [""] * UNITS
    for k, c in enumerate(cases):
        units[k % UNITS] += f"void rlvr_case_{k}(void)\n" + _block(c.code, "") + "\n"
    main = HIDDEN.format(declarations="".join(f"void rlvr_case_{k}(void);\n" for k in range(len(cases))),
                         table=", ".join(f"rlvr_case_{k}" for k in range(len(cases))), leak=LEAK_EXIT)
    return {HARNESS: main, **{f"judge/cases_{u}.c": UNIT.format(module=module, body=body)
                              for u, body in enumerate(units)}}


def makefile(module: str) -> str:
    """The workspace's Makefile."""
    return MAKEFILE.format(module=module)


def makefile_test_rule(text: str) -> str | None:
    """The `test` rule of a Makefile (its line and recipe), or None when it has none: the part the candidate
    must not change."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.split(":", 1)[0].strip() == "test" and ":" in line and not line.startswith("\t"):
            rule = [line.rstrip()]
            for nxt in lines[i + 1:]:
                if not nxt.startswith("\t"):
                    break
                rule.append(nxt.rstrip())
            return "\n".join(rule)
    return None


@cache
def supervisor_source() -> str:
    """The supervisor script, read from this installed package (never from a workspace)."""
    return (Path(__file__).parent / "supervisor.py").read_text(encoding="utf-8")
