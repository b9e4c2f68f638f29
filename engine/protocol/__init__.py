"""Kafka's wire protocol over the tiered log (`python -m engine serve`).

- `messages`: the schemas of the APIs served, as a declarative table (Kafka's message
  JSON facts in the project's own grammar);
- `codec`: one generic encoder/decoder interpreting that table for every version;
- `server`: the asyncio server answering Kafka clients from the RemoteLogManager.
"""
