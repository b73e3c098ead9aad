"""The supervisor's side of the worker processes: spawning them in their sandboxes
(`worker_process`), the pool that starts, dispatches to, respawns and stops them
(`worker_pool`), and the JSON-RPC channel to each (`rpc_channel`). DESIGN §1–§4.

Nothing is re-exported here: import the module that holds what you need.
"""
