"""`python -m spearpy.serve ...` is `spearpy serve ...`."""

from spearpy.serve.cli import serve

serve(prog_name="spearpy serve")
