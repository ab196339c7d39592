"""groupwire broker: the asyncio server, its coordinator core and its storage."""
