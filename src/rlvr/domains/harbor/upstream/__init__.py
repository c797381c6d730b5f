"""Harbor's task models (harbor 0.25.0, Apache-2.0: LICENSE beside this file), carried as the harbor wheel has
them but for their import lines (`harbor.` became `rlvr.domains.harbor.upstream.harbor.`): the wheel needs
Python >= 3.12, these modules import on 3.11 with pydantic and toml. rlvr reads and writes every Harbor
task.toml with them (`rlvr.domains.harbor.format`, `export`). tests/domains/harbor/vendor_harbor.py writes the
copy from a wheel and `make harbor-check` compares it with the wheel on PyPI."""
