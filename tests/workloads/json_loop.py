"""Service-bound workload: a loop serializing large JSON payloads on one thread."""
import json

PAYLOAD = {"rows": [{"id": i, "name": f"item-{i}", "values": [i * 0.5] * 20} for i in range(2000)]}


def serialize_payloads():
    while True:
        json.loads(json.dumps(PAYLOAD))


print("READY", flush=True)
serialize_payloads()
