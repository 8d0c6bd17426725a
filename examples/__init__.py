"""Example implementations checked by the conformance suite (see ``docs/conformance.md``)."""
