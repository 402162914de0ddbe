"""An app module holding 400 MB from import on: shared by children with preload."""

BLOCK = b"x" * (400 * 2**20)  # bytes filled with data: really resident, unlike bytearray(n)
