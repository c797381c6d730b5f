"""Accounts and a journal of balanced transactions."""
from ledger.money import parse_amount

KINDS = ("asset", "liability", "equity", "income", "expense")
DEBIT_NORMAL = ("asset", "expense")


class Ledger:
    """A chart of accounts and the transactions posted to it."""

    def __init__(self):
        self.kinds = {}
        self.transactions = []

    def open(self, name, kind):
        """Open an account of one of KINDS."""
        if kind not in KINDS:
            raise ValueError(f"unknown account kind {kind!r}")
        if name in self.kinds:
            raise ValueError(f"account {name!r} already exists")
        self.kinds[name] = kind

    def post(self, memo, lines):
        """Post a transaction: (account, amount) lines, debits positive and credits negative, summing to 0."""
        parsed = []
        for account, amount in lines:
            if account not in self.kinds:
                raise KeyError(account)
            cents = parse_amount(amount) if isinstance(amount, str) else amount
            parsed.append((account, cents))
        if len(parsed) < 2:
            raise ValueError("a transaction needs at least two lines")
        if sum(c for _, c in parsed) != 0:
            raise ValueError(f"unbalanced transaction {memo!r}")
        self.transactions.append((memo, parsed))
        return len(self.transactions) - 1

    def balance(self, name):
        """The balance of an account in its normal direction (debits for assets and expenses)."""
        total = 0
        for _, lines in self.transactions:
            for account, cents in lines:
                if account == name:
                    total += cents
        return total if self.kinds[name] in DEBIT_NORMAL else -total

    def history(self, name):
        """(memo, signed amount) of every transaction line touching an account, in posting order."""
        return [(memo, cents) for memo, lines in self.transactions for account, cents in lines if account == name]
