"""IO-bound workload: a thread blocked reading a socket that trickles data (port in argv[1])."""
import socket
import sys
import threading


def read_stream(sock):
    total = 0
    while True:
        data = sock.recv(4096)
        if not data:
            return total
        total += len(data)


conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
reader = threading.Thread(target=read_stream, args=(conn,), name="reader")
reader.start()
print("READY", flush=True)
reader.join()
