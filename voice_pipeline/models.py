"""Model preparation and resolution (``voice-pipeline models``). Implemented by the llm/models work."""
