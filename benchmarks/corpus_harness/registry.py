"""Every corpus entry, by name."""

from __future__ import annotations

from corpus_harness import diffusers_entries, more, others, torch_nn, xtransformers
from corpus_harness.entry import Entry

ENTRIES: dict[str, Entry] = {
    e.name: e for e in (*torch_nn.ENTRIES, *xtransformers.ENTRIES,
                        *diffusers_entries.ENTRIES, *others.ENTRIES, *more.ENTRIES)}
