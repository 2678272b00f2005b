"""The in-memory engine: the storage ports and an SQS-shaped queue in one process's memory, with the same
conditions and refusals as the DynamoDB and SQLite adapters. For tests that need no process, emulator or
network (the fast tier); nothing survives the process."""
