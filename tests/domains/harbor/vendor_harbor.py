"""Vendor Harbor's task models into rlvr, or check the vendored copy against a Harbor wheel.

    python tests/domains/harbor/vendor_harbor.py WHEEL           # write the copy (harbor-0.25.0-...whl)
    python tests/domains/harbor/vendor_harbor.py WHEEL --check   # compare it (make harbor-check)

The harbor wheel needs Python >= 3.12, but the modules below import on 3.11 with pydantic and toml alone, so
rlvr carries them (src/rlvr/domains/harbor/upstream/harbor/, Apache-2.0, LICENSE beside them) and reads every
Harbor task.toml with them. The one change from the wheel: `harbor.` in import statements becomes
`rlvr.domains.harbor.upstream.harbor.`, so that the copy never shadows a real `harbor` installed beside rlvr.
"""
from __future__ import annotations

import argparse
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DEST = ROOT / "src/rlvr/domains/harbor/upstream"
FILES = ("harbor/constants.py", "harbor/utils/env.py", "harbor/models/task/config.py",
         "harbor/models/task/step_name.py", "harbor/models/task/artifacts.py", "harbor/models/trial/paths.py")
"""The wheel's files the task models need (config.py imports the others)."""
PACKAGES = ("harbor", "harbor/utils", "harbor/models", "harbor/models/task", "harbor/models/trial")
LICENSE = "harbor-0.25.0.dist-info/licenses/LICENSE"
_IMPORT = re.compile(r"^(\s*)(from|import) harbor\.", re.MULTILINE)


def vendored(text: str) -> str:
    """A wheel module's text as rlvr carries it."""
    return _IMPORT.sub(r"\1\2 rlvr.domains.harbor.upstream.harbor.", text)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--check", action="store_true", help="compare the copy with the wheel, write nothing")
    args = ap.parse_args()
    with zipfile.ZipFile(args.wheel) as whl:
        wanted = {f: vendored(whl.read(f).decode()) for f in FILES}
        wanted["LICENSE"] = whl.read(LICENSE).decode()
    wanted.update({f"{p}/__init__.py": "" for p in PACKAGES})
    differ = [rel for rel, text in wanted.items()
              if not (DEST / rel).is_file() or (DEST / rel).read_text() != text]
    if args.check:
        print(f"vendored Harbor models: {len(wanted) - len(differ)}/{len(wanted)} files match "
              f"{args.wheel.name}" + (f"; differ: {', '.join(differ)}" if differ else ""))
        return 1 if differ else 0
    for rel in differ:
        (DEST / rel).parent.mkdir(parents=True, exist_ok=True)
        (DEST / rel).write_text(wanted[rel])
    print(f"wrote {len(differ)} files under {DEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
