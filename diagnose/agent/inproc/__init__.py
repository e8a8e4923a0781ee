"""The agent's in-target side: runs inside the service, imports only the standard library.

torch and OpenTelemetry are imported lazily, when the target has them.
"""
