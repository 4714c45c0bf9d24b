"""Containment of user code: errors, exits, timers, logs, process state and the offline hub.

Loading, tracing and the CLI all run model code inside these guards; none of them owns
them. Importing this package imports no torch.
"""

from __future__ import annotations
