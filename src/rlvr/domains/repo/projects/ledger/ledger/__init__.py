"""A small double-entry ledger: money amounts, accounts, postings and reports."""
