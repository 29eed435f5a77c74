"""Execute a notebook headless with nbclient (used by tests/suite/notebook.rs); the executed copy is
written next to the given output path so a failure can be inspected."""
import sys

import nbformat
from nbclient import NotebookClient

src, out, cwd = sys.argv[1], sys.argv[2], sys.argv[3]
nb = nbformat.read(src, as_version=4)
try:
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
finally:
    nbformat.write(nb, out)
