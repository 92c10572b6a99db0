"""The local lab: a tiny model built here, real vLLM CPU servers started from it, and the
commands that use them (`demo`: the seed's three comparisons; `servers`: two kept up), and
`trace`: public block-hash traces fetched and checked, your own requests exported as one.
May import every other room; nothing in `routing/` imports it."""
