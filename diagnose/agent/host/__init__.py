"""The agent's host side: find and talk to a target's agent, inject it, start a command with it preloaded."""
