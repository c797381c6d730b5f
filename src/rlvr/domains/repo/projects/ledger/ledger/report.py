"""Reports over a ledger: trial balance and income statement."""
from ledger.accounts import DEBIT_NORMAL
from ledger.money import format_amount


def trial_balance(ledger):
    """(total debits, total credits) of the account balances; equal for a consistent ledger."""
    debits = credits = 0
    for name, kind in ledger.kinds.items():
        bal = ledger.balance(name)
        signed = bal if kind in DEBIT_NORMAL else -bal
        if signed > 0:
            debits += signed
        else:
            credits -= signed
    return debits, credits


def net_income(ledger):
    """Income minus expenses, in cents."""
    income = sum(ledger.balance(n) for n, k in ledger.kinds.items() if k == "income")
    expense = sum(ledger.balance(n) for n, k in ledger.kinds.items() if k == "expense")
    return income - expense


def statement(ledger):
    """Lines 'name: amount' for income and expense accounts, sorted by name, then the net income line."""
    rows = [f"{n}: {format_amount(ledger.balance(n))}" for n in sorted(ledger.kinds)
            if ledger.kinds[n] in ("income", "expense")]
    rows.append(f"net: {format_amount(net_income(ledger))}")
    return rows
