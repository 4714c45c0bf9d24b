"""The rules as text: the list (table, markdown, JSON) and one rule explained, from the rule
objects of :mod:`mhaudit.rules`."""
