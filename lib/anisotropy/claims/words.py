"""The verdict words, spelled once: what a claim's verdict reads (``HOLDS``, ``FAILS``, ``UNTESTABLE``) and why an
every-model claim was not decided on part of its models (``PARTLY``). The ledger, the rules and every page that words a
verdict import them from here."""

HOLDS, FAILS, UNTESTABLE = "holds", "does not hold", "not testable here"
PARTLY = "partly measured"
