"""How a run is driven and shown: the wiring of a run (`run`), its signals
(`run_signals`), print and JSON output (`output_modes`), the RPC mode and its wire
records (`rpc_mode`, `rpc_wire`), the prompts of the command line (`prompt_input`),
model and thinking switching (`model_commands`) and option suggestions
(`option_suggestions`). pi docs rpc.md, json.md, cli.md.

Nothing is re-exported here: import the module that holds what you need.
"""
