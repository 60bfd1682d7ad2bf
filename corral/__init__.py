"""corral: kernel-confined file tools for AI agents."""

from corral.api import AsyncSandbox, Sandbox
from corral.errors import CorralError

__all__ = ["AsyncSandbox", "CorralError", "Sandbox"]
