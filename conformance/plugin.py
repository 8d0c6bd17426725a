"""pytest plugin for the conformance suite (filled in by the conformance suite's issue)."""
