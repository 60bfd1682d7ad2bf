"""A call's contract, below the tools that serve it and above nothing they need:
the typed messages host, zygote and worker exchange (messages.py), the one setup
a sandbox's workers serve with (setup.py), and how a caller waits (waiting.py).
The faces, the API, the sandbox and the tools all speak these; none of them
builds a frame of its own."""
