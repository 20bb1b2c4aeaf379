"""`fleetctl dashboard`: a web dashboard of every schedule's health, each schedule's timeline of
attempts across workers, one slot's whole story, the live processes, and the operator's repairs."""
