"""Memory for the agent frameworks teams already use, each a thin mapping onto :class:`~recall_client.RecallClient`.

Every adapter is an optional extra of the client (``pip install 'recall-client[langgraph]'``, ``[adk]``,
``[autogen]``, ``[openai-agents]``, or ``[frameworks]`` for all) and lives in its own module, imported only
when used. Each acts as one hub identity — the client's — so the hub, not the adapter, decides what it may read:
docs/integrations.md says what maps to what.
"""
