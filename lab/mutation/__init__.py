"""Mutation testing of the safety core (``make mutate``): a curated list of source edits
(``lab.mutation.catalogue``), each applied to a temporary copy of the tree and run against the
tests that name the code it breaks (``lab.mutation.runner``). Every mutation must be killed:
one that survives is a rule no test holds."""
