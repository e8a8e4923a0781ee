"""A target whose frames name a device and carry non-UTF-8 argv (hostile but legal input)."""

code = compile("def spin():\n    while True:\n        sum(range(1000))\n", "/dev/zero", "exec")
ns = {}
exec(code, ns)
print("READY", flush=True)
ns["spin"]()
