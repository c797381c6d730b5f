"""Text families: an access log becomes a report (a script that must also work on other logs), and a large
CSV is summarised by a script that must be correct and fast on fresh data far larger than the sample."""
from __future__ import annotations

import random
from collections import Counter
from typing import Any

from rlvr.domains.shell.families.base import Family, Judging, Snapshot, check, flag, same_output, text_of
from rlvr.sandbox.tree import Member
from rlvr.verify.verdict import Check, Flag

IPS = tuple(f"10.0.{a}.{b}" for a in (1, 2, 7) for b in (3, 14, 15, 92, 65))
PATHS = ("/", "/login", "/api/items", "/api/items/7", "/static/app.js", "/missing", "/old/page", "/admin",
         "/api/cart", "/favicon.ico")
GONE = ("/missing", "/old/page", "/favicon.ico", "/api/items/7")
"""Paths that 404 more often than not."""


def access_log(seed: int, lines: int) -> str:
    """An access log in the combined format, with a few heavy hitters, ties and 404s."""
    rng = random.Random(seed)
    weights = [rng.choice([1, 1, 2, 4, 9]) for _ in IPS]
    out = []
    for k in range(lines):
        ip = rng.choices(IPS, weights)[0]
        path = rng.choice(PATHS)
        query = rng.choice(["", "", "?page=2", "?q=lamp"])
        status = (404 if path in GONE and rng.random() < 0.7 else rng.choice([200, 200, 200, 301, 500]))
        day, minute, second = rng.randint(1, 28), rng.randint(0, 59), rng.randint(0, 59)
        ts = f"{day:02d}/Mar/2025:{k % 24:02d}:{minute:02d}:{second:02d}"
        out.append(f'{ip} - - [{ts} +0000] "{rng.choice(["GET", "GET", "POST"])} {path}{query} HTTP/1.1" '
                   f"{status} {rng.randint(120, 9000)}")
    return "\n".join(out) + "\n"


def _fields(line: str) -> tuple[str, str, int]:
    parts = line.split()
    return parts[0], parts[6].split("?")[0], int(parts[8])


QUESTIONS: dict[str, tuple[str, str, tuple[str, str]]] = {
    "top_ips": ("for the {n} IP addresses that made the most requests, `COUNT IP` on one line each, most "
                "requests first, ties by the address (as text, ascending)",
                "awk '{{print $1}}' \"$1\" | sort | uniq -c | sort -k1,1nr -k2,2 | head -n {n} | "
                "awk '{{print $1, $2}}'",
                ("| head -n {n} |", "|")),
    "status_counts": ("how many requests got each HTTP status code, `STATUS COUNT` on one line each, by "
                      "status "
                      "code ascending",
                      "awk '{{print $9}}' \"$1\" | sort -n | uniq -c | awk '{{print $2, $1}}'",
                      ("print $2, $1", "print $1, $2")),
    "not_found_paths": ("for every path that got a 404, how many times it did (the path without its query "
                        "string), `COUNT PATH` on one line each, most first, ties by the path (as text, "
                        "ascending)",
                        "awk '$9 == 404 {{sub(/\\?.*/, \"\", $7); print $7}}' \"$1\" | sort | uniq -c | "
                        "sort -k1,1nr -k2,2 | awk '{{print $1, $2}}'",
                        ("-k2,2 | awk", "-k2,2 | head -n 2 | awk")),
}
"""question -> (what to print, the reference pipeline, a mistake: an (old, new) edit of it), the first two
format strings over the params."""


def report(p: dict[str, Any], log: str) -> str:
    """The model of a question's report on `log`."""
    rows = [_fields(line) for line in log.splitlines() if line.strip()]
    if p["question"] == "top_ips":
        counts = Counter(ip for ip, _, _ in rows)
        return "".join(f"{c} {ip}\n" for ip, c in sorted(counts.items(), key=lambda x: (-x[1],
                                                                                        x[0]))[:p["n"]])
    if p["question"] == "status_counts":
        return "".join(f"{s} {c}\n" for s, c in sorted(Counter(s for _, _, s in rows).items()))
    counts = Counter(path for _, path, s in rows if s == 404)
    return "".join(f"{c} {path}\n" for path, c in sorted(counts.items(), key=lambda x: (-x[1], x[0])))


def fresh_runs(j: Judging, script: str, inputs: list[str], stdin: bool, timeout_s: float) -> list[str]:
    """The candidate's script run on each fresh input (a new file; its name as the argument, or on stdin)."""
    outs = []
    for k, text in enumerate(inputs):
        path = f".rlvr-fresh-{k}"
        cmd = f"bash {script} < {path}" if stdin else f"bash {script} {path}"
        res = j.run(cmd, files={path: text}, timeout_s=timeout_s)
        outs.append(res.stdout if res.status.value == "ok" else f"[{res.status.value}] {res.stderr[-200:]}")
    return outs


def judge_script(j: Judging, script: str, visible: tuple[str, str], fresh: list[tuple[str, str]],
                 stdin: bool, timeout_s: float) -> tuple[list[Check], list[Flag]]:
    """A script judged on the visible input and fresh ones: (input, expected output) pairs. Flags
    `hard_coded` when its output stays the visible answer on fresh inputs whose answers differ."""
    if text_of(j.state, script) is None:
        return [check(script, False, f"{script} is missing")], []
    outs = fresh_runs(j, script, [visible[0], *(i for i, _ in fresh)], stdin, timeout_s)
    checks = [check(f"{script} on the given input", same_output(outs[0], visible[1]), f"printed {outs[0]!r}")]
    checks += [check(f"{script} on fresh input {k + 1}", same_output(out, want), f"printed {out[:200]!r}")
               for k, (out, (_, want)) in enumerate(zip(outs[1:], fresh))]
    flags = []
    if fresh and all(same_output(out, visible[1]) for out in outs[1:]) and not all(
            same_output(want, visible[1]) for _, want in fresh):
        flags.append(flag("hard_coded", "the script prints the given input's answer whatever the input",
                          outs[1], script))
    return checks, flags


class LogReport(Family):
    name, tier = "log_report", "easy"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"question": rng.choice(sorted(QUESTIONS)), "n": rng.randint(3, 5),
                "log_seed": rng.randrange(1 << 30),
                "lines": rng.randint(60, 160)}

    def initial(self, p: dict[str, Any]) -> Snapshot:
        return {"logs/access.log": Member("logs/access.log", access_log(p["log_seed"], p["lines"]).encode())}

    def prompt(self, p: dict[str, Any]) -> str:
        what = QUESTIONS[p["question"]][0].format(**p)
        return ("The web server's access log is `logs/access.log`: one request per line in the combined log "
                "format (address, date, request line, status code, bytes). Write a bash script `report.sh` "
                f"that reads the log file named by its first argument and prints {what}. Then run it on "
                "`logs/access.log` and save its output in `report.txt`. The script will also be run on other "
                "logs of the same format, so it must compute the report, not repeat this one.\n")

    def _script(self, p: dict[str, Any]) -> str:
        return "#!/bin/bash\n" + QUESTIONS[p["question"]][1].format(**p) + "\n"

    def solve(self, p: dict[str, Any]) -> list[str]:
        return [f"cat > report.sh <<'EOF'\n{self._script(p)}EOF", "chmod +x report.sh",
                "./report.sh logs/access.log > report.txt && cat report.txt"]

    def gold(self, p: dict[str, Any]) -> Snapshot:
        state = self.initial(p)
        out = report(p, access_log(p["log_seed"], p["lines"]))
        state["report.sh"] = Member("report.sh", self._script(p).encode(), 0o755)
        state["report.txt"] = Member("report.txt", out.encode())
        return state

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        state = self.gold(p)
        answer = report(p, access_log(p["log_seed"], p["lines"]))
        spelled = f"#!/bin/bash\ncat <<'EOF'\n{answer}EOF\n"
        old, new = QUESTIONS[p["question"]][2]
        bad = self._script(p).replace(old.format(**p), new.format(**p))
        return {"hard_coded_report": {**state, "report.sh": Member("report.sh", spelled.encode(), 0o755)},
                "wrong_script": {**state, "report.sh": Member("report.sh", bad.encode(), 0o755)}}

    def judge(self, p: dict[str, Any], j: Judging) -> tuple[list[Check], list[Flag]]:
        log = access_log(p["log_seed"], p["lines"])
        want = report(p, log)
        saved = text_of(j.state, "report.txt")
        checks = [check("report.txt", saved is not None and same_output(saved, want),
                        f"report.txt holds {saved!r}" if saved is not None else "report.txt is missing")]
        fresh = []
        for _ in range(2):
            other = access_log(j.rng.randrange(1 << 30), j.rng.randint(80, 200))
            fresh.append((other, report(p, other)))
        more, flags = judge_script(j, "report.sh", (log, want), fresh, stdin=False, timeout_s=20)
        return checks + more, flags


REGIONS = ("north", "south", "east", "west", "central", "coast")
PRODUCTS = ("lamp", "kettle", "spade", "chess", "atlas", "saw", "mug", "puzzle", "rake", "drill")
GROUPS = {"region": ("$2", 1), "product": ("$3", 2), "month": ("substr($1, 1, 7)", 0)}
METRICS = {"revenue": ("$4 * $5", "the revenue in cents (the sum of units * price_cents)"),
           "units": ("$4", "the number of units (the sum of units)")}
BIG_ROWS = 100_000


def sales(seed: int, rows: int) -> str:
    rng = random.Random(seed)
    lines = ["date,region,product,units,price_cents"]
    for _ in range(rows):
        lines.append(f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d},{rng.choice(REGIONS)},"
                     f"{rng.choice(PRODUCTS)},{rng.randint(1, 20)},{rng.randint(99, 99_999)}")
    return "\n".join(lines) + "\n"


def summary(p: dict[str, Any], csv: str) -> str:
    totals: Counter[str] = Counter()
    for line in csv.splitlines()[1:]:
        date, region, product, units, price = line.split(",")
        key = {"region": region, "product": product, "month": date[:7]}[p["group"]]
        totals[key] += int(units) * (int(price) if p["metric"] == "revenue" else 1)
    return "".join(f"{k} {v}\n" for k, v in sorted(totals.items(), key=lambda x: (-x[1], x[0])))


class TextScale(Family):
    name, tier = "text_at_scale", "hard"

    def params(self, rng: random.Random) -> dict[str, Any]:
        return {"group": rng.choice(sorted(GROUPS)), "metric": rng.choice(sorted(METRICS)),
                "sample_seed": rng.randrange(1 << 30)}

    def initial(self, p: dict[str, Any]) -> Snapshot:
        return {"data/sales.csv": Member("data/sales.csv", sales(p["sample_seed"], 200).encode())}

    def prompt(self, p: dict[str, Any]) -> str:
        return ("`data/sales.csv` is a sample of the sales export: a CSV with the header "
                "`date,region,product,units,price_cents` (dates are YYYY-MM-DD; no field holds a comma). "
                "Write "
                "a bash script `summarize.sh` that reads such a CSV on standard input and prints one line "
                "per "
                f"{p['group']} (for a month: YYYY-MM), `{p['group'].upper()} TOTAL`, where TOTAL is "
                f"{METRICS[p['metric']][1]}, highest total first, ties by the {p['group']} as text. It will "
                "be "
                f"judged on exports of {BIG_ROWS:,} rows, where it must finish within 20 seconds.\n")

    def _script(self, p: dict[str, Any]) -> str:
        key, expr = GROUPS[p["group"]][0], METRICS[p["metric"]][0]
        return ("#!/bin/bash\nawk -F, 'NR > 1 {s[" + key + "] += " + expr + "} "
                "END {for (k in s) printf \"%s %d\\n\", k, s[k]}' | sort -k2,2nr -k1,1\n")

    def solve(self, p: dict[str, Any]) -> list[str]:
        return [f"cat > summarize.sh <<'EOF'\n{self._script(p)}EOF", "chmod +x summarize.sh",
                "./summarize.sh < data/sales.csv | head"]

    def gold(self, p: dict[str, Any]) -> Snapshot:
        return {**self.initial(p), "summarize.sh": Member("summarize.sh", self._script(p).encode(), 0o755)}

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        answer = summary(p, sales(p["sample_seed"], 200))
        slow = ("#!/bin/bash\n# a line at a time in bash: right, and far too slow at scale\n"
                "declare -A s\nread -r header\nwhile IFS=, read -r date region product units price; do\n"
                "  for i in $(seq 1 40); do :; done\n"
                + {"region": "  k=$region\n", "product": "  k=$product\n",
                   "month": "  k=${date:0:7}\n"}[p["group"]]
                + ("  s[$k]=$(( ${s[$k]:-0} + units * price ))\n" if p["metric"] == "revenue"
                   else "  s[$k]=$(( ${s[$k]:-0} + units ))\n")
                + "done\nfor k in \"${!s[@]}\"; do echo \"$k ${s[$k]}\"; done | sort -k2,2nr -k1,1\n")
        return {"hard_coded_summary": {**self.initial(p), "summarize.sh": Member(
                    "summarize.sh", f"#!/bin/bash\ncat <<'EOF'\n{answer}EOF\n".encode(), 0o755)},
                "too_slow": {**self.initial(p), "summarize.sh": Member("summarize.sh", slow.encode(), 0o755)}}

    def judge(self, p: dict[str, Any], j: Judging) -> tuple[list[Check], list[Flag]]:
        sample = sales(p["sample_seed"], 200)
        big = sales(j.rng.randrange(1 << 30), BIG_ROWS)
        return judge_script(j, "summarize.sh", (sample, summary(p, sample)), [(big, summary(p, big))],
                            stdin=True, timeout_s=20)


FAMILIES: tuple[Family, ...] = (LogReport(), TextScale())
