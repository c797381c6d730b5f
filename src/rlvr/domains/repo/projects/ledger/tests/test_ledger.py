import pytest
from ledger.accounts import Ledger
from ledger.report import net_income, statement, trial_balance


def make():
    led = Ledger()
    led.open("cash", "asset")
    led.open("loan", "liability")
    led.open("capital", "equity")
    led.open("sales", "income")
    led.open("rent", "expense")
    led.post("start", [("cash", "1000.00"), ("capital", "-1000.00")])
    led.post("borrow", [("cash", 50000), ("loan", -50000)])
    led.post("sale", [("cash", "250.00"), ("sales", "-250.00")])
    led.post("rent", [("rent", "100.00"), ("cash", "-100.00")])
    return led


def test_balances_in_normal_direction():
    led = make()
    assert led.balance("cash") == 165000
    assert led.balance("loan") == 50000
    assert led.balance("capital") == 100000
    assert led.balance("sales") == 25000
    assert led.balance("rent") == 10000


def test_post_returns_index_and_records_history():
    led = make()
    assert led.post("more rent", [("rent", 500), ("cash", -500)]) == 4
    assert led.history("rent") == [("rent", 10000), ("more rent", 500)]


def test_unbalanced_transaction_is_refused():
    led = make()
    with pytest.raises(ValueError):
        led.post("bad", [("cash", 100), ("sales", -99)])
    assert len(led.transactions) == 4


def test_single_line_transaction_is_refused():
    led = make()
    with pytest.raises(ValueError):
        led.post("bad", [("cash", 0)])


def test_unknown_account_and_kind():
    led = make()
    with pytest.raises(KeyError):
        led.post("x", [("nope", 1), ("cash", -1)])
    with pytest.raises(ValueError):
        led.open("x", "bogus")
    with pytest.raises(ValueError):
        led.open("cash", "asset")


def test_trial_balance_is_balanced():
    debits, credits = trial_balance(make())
    assert debits == credits == 175000


def test_net_income_and_statement():
    led = make()
    assert net_income(led) == 15000
    assert statement(led) == ["rent: 100.00", "sales: 250.00", "net: 150.00"]


def test_net_loss():
    led = make()
    led.post("big rent", [("rent", 30000), ("cash", -30000)])
    assert net_income(led) == -15000
    assert statement(led)[-1] == "net: -150.00"
