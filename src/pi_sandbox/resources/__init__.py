"""Resources the agent loads from disk: project trust, skills, prompt templates (issue 6).

Import-free on purpose: import the submodules directly.
"""

__all__: list[str] = []
