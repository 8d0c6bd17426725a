"""The rule tests: one or more per spec rule, written only against the adapter (``Kit``).

Each test is marked ``@pytest.mark.rule("ID", ...)`` and runs ``async def scenario(kit)`` through
the ``run`` fixture, on the simulator, under the schedule the plugin chose.
"""
