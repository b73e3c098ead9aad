"""The agent loop and the tool-call pipeline: turns of model and tools (`agent_session`),
each tool call's path through hooks, policy and a worker (`tool_pipeline`), which tools
the model is told of (`tool_selection`, `tool_exposure`) and the validation of their
arguments (`schema_validation`). DESIGN §1, §4, §9.

Nothing is re-exported here: import the module that holds what you need.
"""
