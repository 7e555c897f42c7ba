"""`kernelrl serve`: the reward as an HTTP service, for trainers and agents in other processes or machines.

`jobs` is the durable queue (SQLite, WAL), `dispatch` feeds a scheduler from it, `service` validates and
accepts requests, `app` is the HTTP layer and `cli` the command. The client is `kernelrl.client`.
"""
