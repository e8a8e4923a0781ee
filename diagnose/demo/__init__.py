"""The bundled demo: a small CPU inference service behind HTTP and a load generator."""
