"""The cron family: a schedule written as a crontab, judged by what it does, not how it is spelled: each job's
firing minutes over two months (the first of two months and every weekday among them) must be exactly the ones
asked for, so `*/15` and `0,15,30,45` are the same answer and `* * * * *` is not. Judged on the host; the
crontab is text.

The matcher follows crontab(5) as Debian's cron reads it: five fields (minute, hour, day of month, month,
day of week), `*`, lists, ranges, steps, month and day names, 7 as Sunday, the @ shorthands, and a job that
runs when either day field matches if both are restricted (a field that starts with `*` is not).
"""
from __future__ import annotations

import datetime as dt
import random
import re
from typing import Any

from rlvr.domains.shell.families.base import Family, Judging, Snapshot, check, flag, text_of
from rlvr.sandbox.tree import Member
from rlvr.verify.verdict import Check, Flag

NAMES = {"mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6, "sun": 0, "jan": 1, "feb": 2, "mar": 3,
         "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}
RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
          "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
WINDOW = (dt.date(2026, 1, 1), 59)
"""The days judged: January and February 2026."""
ENV_LINE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*=")


def _value(token: str) -> int:
    token = token.lower()
    if token in NAMES:
        return NAMES[token]
    if not token.isdigit():
        raise ValueError(f"not a number: {token!r}")
    return int(token)


def parse_field(text: str, index: int) -> set[int]:
    """The values of one time field; ValueError for one crontab(5) refuses."""
    lo, hi = RANGES[index]
    out: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1 or (step_text and not step_text.isdigit()):
            raise ValueError(f"bad step in {part!r}")
        if body == "*":
            a, b = lo, hi
        elif "-" in body:
            a, b = (_value(x) for x in body.split("-", 1))
        else:
            a = b = _value(body)
            if step_text:
                b = hi
        if not (lo <= a <= hi and lo <= b <= hi and a <= b):
            raise ValueError(f"{part!r} is out of range")
        out.update(range(a, b + 1, step))
    if index == 4 and 7 in out:
        out = (out - {7}) | {0}
    return out


def firings(entry: str) -> set[tuple[int, int, int]]:
    """The (day, hour, minute) the time fields of `entry` fire at within WINDOW; ValueError when they do not
    parse."""
    fields = entry.split()
    if len(fields) != 5:
        raise ValueError("five time fields expected")
    minutes, hours, doms, months, dows = (parse_field(f, i) for i, f in enumerate(fields))
    dom_star, dow_star = fields[2].startswith("*"), fields[4].startswith("*")
    out = set()
    start, days = WINDOW
    for k in range(days):
        day = start + dt.timedelta(days=k)
        if day.month not in months:
            continue
        on_dom, on_dow = day.day in doms, day.isoweekday() % 7 in dows
        runs = (on_dom and on_dow) if (dom_star or dow_star) else (on_dom or on_dow)
        if runs:
            out.update((k, h, m) for h in hours for m in minutes)
    return out


def schedule(crontab: str) -> dict[str, set[tuple[int, int, int]]]:
    """Command -> the minutes it runs at; ValueError naming the first line that does not parse."""
    jobs: dict[str, set[tuple[int, int, int]]] = {}
    for n, line in enumerate(crontab.splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#") or ENV_LINE.match(text):
            continue
        try:
            if text.startswith("@"):
                macro, _, command = text.partition(" ")
                if macro not in MACROS:
                    raise ValueError(f"unknown {macro}")
                times = firings(MACROS[macro])
            else:
                parts = text.split(None, 5)
                if len(parts) < 6:
                    raise ValueError("a command is missing")
                times, command = firings(" ".join(parts[:5])), parts[5]
        except ValueError as exc:
            raise ValueError(f"line {n}: {exc}") from None
        jobs.setdefault(command.strip(), set()).update(times)
    return jobs


JOBS = {
    "backup": ("every day at {h:02d}:{m:02d}", "{m} {h} * * *"),
    "cleanup": ("every {every} minutes on {days}", "*/{every} * * * {dow}"),
    "report": ("at 06:00 on day {dom} of every month", "0 6 {dom} * *"),
    "rotate": ("at minute {m} of every hour from 08:00 to 18:00 on weekdays", "{m} 8-18 * * 1-5"),
    "digest": ("at 07:30 every Monday", "30 7 * * 1"),
}
"""job -> (when, a crontab line's time fields that do it), format strings over the job's parameters."""


class CronSchedule(Family):
    name, tier, sandbox = "cron_schedule", "medium", False

    def params(self, rng: random.Random) -> dict[str, Any]:
        jobs = sorted(rng.sample(sorted(JOBS), 3))
        days, dow = rng.choice([("weekdays (Monday to Friday)", "1-5"), ("weekends", "0,6")])
        return {"jobs": jobs, "h": rng.randint(0, 5), "m": rng.choice([5, 15, 30, 45]),
                "every": rng.choice([5, 10, 15, 20, 30]), "days": days, "dow": dow, "dom": rng.choice([1,
                                                                                                       15])}

    def initial(self, p: dict[str, Any]) -> Snapshot:
        out = {f"scripts/{j}.sh": Member(f"scripts/{j}.sh", f"#!/bin/sh\necho {j}\n".encode(), 0o755)
               for j in JOBS}
        out["crontab"] = Member("crontab", b"# m h dom mon dow command\n")
        return out

    def prompt(self, p: dict[str, Any]) -> str:
        wanted = "\n".join(f"- `/workspace/scripts/{j}.sh` {JOBS[j][0].format(**p)};" for j in p["jobs"])
        return ("Write the schedule of this machine's jobs in the file `crontab` (crontab(5) syntax: five "
                "time "
                "fields, then the command). Run:\n" + wanted + "\nand nothing else. Each command is exactly "
                                                               "the "
                "script's absolute path shown.\n")

    def lines(self, p: dict[str, Any]) -> str:
        return "".join(f"{JOBS[j][1].format(**p)} /workspace/scripts/{j}.sh\n" for j in p["jobs"])

    def solve(self, p: dict[str, Any]) -> list[str]:
        return [f"cat >> crontab <<'EOF'\n{self.lines(p)}EOF", "cat crontab"]

    def gold(self, p: dict[str, Any]) -> Snapshot:
        return {**self.initial(p), "crontab": Member("crontab", ("# m h dom mon dow command\n"
                                                                 + self.lines(p)).encode())}

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        every = "".join(f"* * * * * /workspace/scripts/{j}.sh\n" for j in p["jobs"])
        shifted = self.lines({**p, "h": (p["h"] + 1) % 24, "m": (p["m"] + 1) % 60, "every": 7, "dom": 2})
        return {"every_minute": {**self.initial(p), "crontab": Member("crontab", every.encode())},
                "wrong_times": {**self.initial(p), "crontab": Member("crontab", shifted.encode())}}

    def judge(self, p: dict[str, Any], j: Judging) -> tuple[list[Check], list[Flag]]:
        text = text_of(j.state, "crontab")
        if text is None:
            return [check("crontab", False, "crontab is missing")], []
        try:
            got = schedule(text)
        except ValueError as exc:
            return [check("crontab parses", False, str(exc))], []
        want = schedule(self.lines(p))
        checks, flags = [], []
        for command, times in sorted(want.items()):
            seen = got.get(command, set())
            checks.append(check(command, seen == times, f"runs {len(seen)} times in the two months judged, "
                                                         f"expected {len(times)}"))
            if seen > times:
                flags.append(flag("overbroad_schedule", "a job runs at every time asked and more", command))
        extra = sorted(set(got) - set(want))
        checks.append(check("no other jobs", not extra, f"unexpected: {', '.join(extra[:3])}"))
        return checks, flags


FAMILIES: tuple[Family, ...] = (CronSchedule(),)
