"""A deliberately tiny agent loop, written the way a third party might: it does the happy path
(queue, one turn per burst, model, tools, continuation) and skips most of the contract's fine
print. ``examples/tiny_loop/adapter.py`` plugs it into the conformance suite::

    loopkit conformance --impl examples.tiny_loop.adapter:implementation

It fails many rules; the report says which and why.
"""

from .loop import TinyAgent, TinyService

__all__ = ["TinyAgent", "TinyService"]
