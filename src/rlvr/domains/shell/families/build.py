"""The build family: a small C program whose Makefile is broken in one or two of the ways Makefiles break (an
object missing from the link, the include directory or the maths library forgotten, headers that rebuild
nothing, a clean that leaves objects behind). Judged in the image, one job per question so that nothing a
recipe prints can answer for another: `make` builds ./app, ./app prints what the model says on fresh
arguments, a second `make` has nothing to do, touching a header or a source makes it rebuild, and `make clean`
leaves no objects or app. The sources may not change."""
from __future__ import annotations

import math
import random
import shlex
from typing import Any

from rlvr.domains.shell.families.base import Family, Judging, Snapshot, check, flag, text_of
from rlvr.sandbox.tree import Member
from rlvr.verify.verdict import Check, Flag

SOURCES = {
    "include/stats.h": "#ifndef STATS_H\n#define STATS_H\n#include <stddef.h>\n\n"
                       "long stats_sum(const long *v, size_t n);\nlong stats_max(const long *v, size_t n);\n"
                       "double stats_mean(const long *v, size_t n);\ndouble stats_norm(const long *v, size_t "
                       "n);\n\n"
                       "#endif\n",
    "include/report.h": "#ifndef REPORT_H\n#define REPORT_H\n\nvoid report_row(const char *label, double "
                        "value);\n\n"
                        "#endif\n",
    "src/stats.c": '#include <math.h>\n#include "stats.h"\n\n'
                   "long stats_sum(const long *v, size_t n)\n{\n    long s = 0;\n    for (size_t i = 0; i < "
                   "n; i++)\n"
                   "        s += v[i];\n    return s;\n}\n\nlong stats_max(const long *v, size_t n)\n{\n"
                   "    long m = v[0];\n    for (size_t i = 1; i < n; i++)\n        if (v[i] > m)\n"
                   "            m = v[i];\n    return m;\n}\n\ndouble stats_mean(const long *v, size_t "
                   "n)\n{\n"
                   "    return (double)stats_sum(v, n) / (double)n;\n}\n\n"
                   "double stats_norm(const long *v, size_t n)\n{\n    double s = 0;\n"
                   "    for (size_t i = 0; i < n; i++)\n        s += (double)v[i] * (double)v[i];\n"
                   "    return sqrt(s);\n}\n",
    "src/report.c": '#include <stdio.h>\n#include "report.h"\n\nvoid report_row(const char *label, double '
                    'value)\n{\n'
                    '    printf("%-5s %.2f\\n", label, value);\n}\n',
    "src/main.c": '#include <stdio.h>\n#include <stdlib.h>\n#include "report.h"\n#include "stats.h"\n\n'
                  "int main(int argc, char **argv)\n{\n    if (argc < 2) {\n"
                  '        fprintf(stderr, "usage: app NUMBER...\\n");\n        return 2;\n    }\n'
                  "    size_t n = (size_t)(argc - 1);\n    long *v = malloc(n * sizeof *v);\n"
                  "    for (size_t i = 0; i < n; i++)\n        v[i] = strtol(argv[i + 1], NULL, 10);\n"
                  '    report_row("count", (double)n);\n    report_row("sum", (double)stats_sum(v, n));\n'
                  '    report_row("max", (double)stats_max(v, n));\n    report_row("mean", stats_mean(v, '
                  'n));\n'
                  '    report_row("norm", stats_norm(v, n));\n    free(v);\n    return 0;\n}\n',
}
GOOD = {
    "cflags": "CFLAGS = -std=c11 -Wall -O1 -Iinclude\n",
    "libs": "LDLIBS = -lm\n",
    "objects": "OBJ = build/main.o build/stats.o build/report.o\n",
    "deps": "build/%.o: src/%.c $(wildcard include/*.h)\n",
    "clean": "\trm -rf build app\n",
}
BUGS = {
    "missing_object": ("objects", "OBJ = build/main.o build/stats.o\n"),
    "no_include_dir": ("cflags", "CFLAGS = -std=c11 -Wall -O1\n"),
    "no_libm": ("libs", "LDLIBS =\n"),
    "no_header_deps": ("deps", "build/%.o: src/%.c\n"),
    "clean_leaves_objects": ("clean", "\trm -f app\n"),
}
"""bug -> (the line it breaks, the broken line)."""


def makefile(parts: dict[str, str]) -> str:
    head = "# Builds ./app from src/ and include/.\nCC = gcc\n"
    return (head + parts["cflags"] + parts["libs"] + parts["objects"]
            + "\napp: $(OBJ)\n\t$(CC) -o $@ $(OBJ) $(LDLIBS)\n\n" + parts["deps"] + "\t@mkdir -p build\n"
            "\t$(CC) $(CFLAGS) -c -o $@ $<\n\nclean:\n" + parts["clean"] + "\n.PHONY: clean\n")


def app_output(args: list[int]) -> str:
    """The model of ./app."""
    rows = [("count", len(args)), ("sum", sum(args)), ("max", max(args)), ("mean", sum(args) / len(args)),
            ("norm", math.sqrt(sum(x * x for x in args)))]
    return "".join(f"{label:<5} {value:.2f}\n" for label, value in rows)


class BuildFix(Family):
    name, tier = "fix_the_build", "medium"

    def params(self, rng: random.Random) -> dict[str, Any]:
        first = rng.choice(["missing_object", "no_include_dir", "no_libm"])
        second = rng.choice(["no_header_deps", "clean_leaves_objects", None])
        return {"bugs": [b for b in (first, second) if b]}

    def _makefile(self, bugs: list[str]) -> str:
        parts = dict(GOOD)
        for bug in bugs:
            key, line = BUGS[bug]
            parts[key] = line
        return makefile(parts)

    def initial(self, p: dict[str, Any]) -> Snapshot:
        files = {**SOURCES, "Makefile": self._makefile(p["bugs"])}
        return {k: Member(k, v.encode()) for k, v in files.items()}

    def prompt(self, p: dict[str, Any]) -> str:
        return ("`make` should build the program `./app` (it prints statistics of the integers given as its "
                "arguments: `./app 3 4 5`), but the build is broken. Fix the Makefile so that `make` builds "
                "./app from `src/` and `include/`, a change to any source or header rebuilds what depends on "
                "it (and a second `make` has nothing to do), and `make clean` removes everything the build "
                "made. Change only the Makefile.\n")

    def solve(self, p: dict[str, Any]) -> list[str]:
        return ["make 2>&1 | tail -n 5", f"cat > Makefile <<'EOF'\n{self._makefile([])}EOF",
                "make && ./app 3 4 5 && make clean && ls"]

    def gold(self, p: dict[str, Any]) -> Snapshot:
        return {**self.initial(p), "Makefile": Member("Makefile", self._makefile([]).encode())}

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        out = {}
        if len(p["bugs"]) > 1:  # the first bug fixed, the second left
            out["half_fixed"] = {**self.initial(p), "Makefile": Member("Makefile",
                                                                       self._makefile(p["bugs"][1:])
                                                                      .encode())}
        fake = ("app:\n\tprintf '#!/bin/sh\\necho count 3.00\\n' > app\n\tchmod +x app\n\n"
                "clean:\n\trm -f app\n.PHONY: clean\n")
        out["script_for_app"] = {**self.initial(p), "Makefile": Member("Makefile", fake.encode())}
        return out

    def judge(self, p: dict[str, Any], j: Judging) -> tuple[list[Check], list[Flag]]:
        changed = [path for path, text in SOURCES.items() if text_of(j.state, path) != text]
        flags = [flag("tampering", "the sources were changed", ", ".join(changed))] if changed else []
        built = j.run("rm -rf build app; make", timeout_s=120)
        checks = [check("make builds ./app", built.exit_code == 0 and j.run("test -x app").exit_code == 0,
                        f"make: exit {built.exit_code}: {(built.stdout + built.stderr)[-300:]}")]
        if not checks[0].passed:
            return checks, flags
        if j.run("head -c 2 app | grep -q '#!'").exit_code == 0:
            flags.append(flag("fake_binary", "./app is a script, not the program built from the sources",
                              "#!"))
        for k in range(3):
            args = [j.rng.randint(-50, 500) for _ in range(j.rng.randint(1, 6))]
            res = j.run("./app " + shlex.join(str(a) for a in args), timeout_s=10)
            checks.append(check(f"./app on fresh arguments {k + 1}", res.stdout == app_output(args),
                                f"printed {res.stdout[:120]!r} for {args}"))
        steps = [("a second make has nothing to do", "make -q app", 0),
                 ("a changed header rebuilds", "touch include/stats.h && make -q app", 1),
                 ("a changed source rebuilds", "make >/dev/null 2>&1; touch src/report.c && make -q app", 1),
                 ("make clean removes the build", "make clean >/dev/null 2>&1; "
                                                  "! find . \\( -name '*.o' -o -name app \\) -type f | grep "
                                                  "-q .", 0)]
        for name, script, want in steps:
            res = j.run(script, timeout_s=120)
            checks.append(check(name, res.exit_code == want, f"exit {res.exit_code}, expected {want}"))
        return checks, flags


FAMILIES: tuple[Family, ...] = (BuildFix(),)
