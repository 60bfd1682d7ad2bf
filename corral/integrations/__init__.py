"""corral inside Python agent frameworks, in process: no subprocess, no MCP.

One module per framework, each behind its own extra so corral's own dependencies
stay as they are (`import corral` imports none of them):

    from corral.integrations.deepagents import CorralBackend      # extra deepagents
    from corral.integrations.openai_agents import tools, CorralFilesystem  # extra openai-agents
    from corral.integrations.pydantic_ai import CorralToolset     # extra pydantic-ai
    from corral.integrations.langchain import CorralToolkit       # extra langchain

Each takes a Sandbox (or AsyncSandbox, or a Pool's sandbox) the host made; its
tools are `sb.tools()`, and the model sees corral's text.
"""
