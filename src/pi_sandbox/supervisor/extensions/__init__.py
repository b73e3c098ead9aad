"""The extension runtime's supervisor side: where extensions come from
(`extension_discovery`), whether a run may go on without some of them
(`extension_requirements`), the host that answers their calls and runs their
commands (`session_host`), and the trust-requiring resources a sandboxed run
changed (`resource_changes`). DESIGN §3–§5, issue 5.

Nothing is re-exported here: import the module that holds what you need.
"""
