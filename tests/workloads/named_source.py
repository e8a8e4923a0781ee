"""A target whose hot frame names a file of its choosing as its source (sys.argv[1]): diagnose,
as root, must read that file only if this process could."""
import sys

code = compile("def spin():\n    while True:\n        sum(range(1000))\n", sys.argv[1], "exec")
ns = {}
exec(code, ns)
print("READY", flush=True)
ns["spin"]()
