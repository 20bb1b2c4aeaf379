"""The reading side: each schedule's health verdict and roll-up, its runs and attempts, the slot ledger and
its verification, and the typed records fleet.Client returns."""
